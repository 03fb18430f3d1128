//go:build unix

package redisstore_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core/redisstore"
	"github.com/tollgate-go/tollgate/core/redistest"
)

// holderEnv, set to a Redis address, makes the test binary a replica that
// takes every slot of a tenant there and holds them until it is killed.
const holderEnv = "TOLLGATE_TEST_SLOT_HOLDER"

// TestKilledReplicaFreesSlots: a replica killed with SIGKILL while its
// requests hold every slot of a tenant, for longer than a lease (its
// Limiter renews them), leaves them taken until their leases end: another
// replica gets them back within the lease of 10 s.
func TestKilledReplicaFreesSlots(t *testing.T) {
	long(t)
	// It waits out two leases on a server of its own, beside the other
	// parallel tests, after the timed fault scenarios.
	t.Parallel()
	if addr := os.Getenv(holderEnv); addr != "" {
		holdSlots(t, addr)
		return
	}
	srv := redistest.Start(t)
	child := exec.Command(os.Args[0], "-test.run=^TestKilledReplicaFreesSlots$", "-test.count=1")
	child.Env = append(os.Environ(), holderEnv+"="+srv.Addr())
	child.Stderr = os.Stderr
	// The child holds its slots until its stdin closes, which it also does
	// if this test dies first.
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		child.Process.Kill()
		child.Wait()
	})
	lines := bufio.NewScanner(out)
	for lines.Scan() && lines.Text() != "holding" {
	}
	if err := lines.Err(); err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, out)

	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { client.Close() })
	s, err := redisstore.New(client, redisstore.WithLogger(nil), redisstore.WithPrefix(holderPrefix))
	if err != nil {
		t.Fatal(err)
	}
	l := limiter(t, s, inFlightPlan)
	ctx := context.Background()
	took := time.Now()
	take(t, l, ctx, "t", false)
	// Past the lease, the renewed slots are still held.
	time.Sleep(lease + lease/10)
	take(t, l, ctx, "t", false)

	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	child.Wait()
	for {
		d, err := l.Inspect(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		if d.Results()[1].Remaining == 5 {
			break
		}
		if time.Since(killed) > 3*lease {
			t.Fatalf("the slots of the killed replica are still taken %v after it died", time.Since(killed))
		}
		time.Sleep(10 * time.Millisecond)
	}
	freed := time.Since(killed)
	t.Logf("slots held %v, through renewals; free again %v after the SIGKILL (lease %v)", killed.Sub(took).Round(time.Millisecond), freed.Round(time.Millisecond), lease)
	// A lease ends at most its length after its last renewal, which came
	// before the kill; allow for the polling and a loaded machine.
	if freed > lease+time.Second {
		t.Fatalf("the slots came free %v after the kill; the lease is %v", freed, lease)
	}
}

// holderPrefix keeps the keys of TestKilledReplicaFreesSlots, on a Redis
// of its own.
const holderPrefix = "killed:"

// holdSlots is the replica that TestKilledReplicaFreesSlots kills: it
// takes every slot of tenant "t" through a Limiter of its own, says
// "holding", and waits for the end of its stdin.
func holdSlots(t *testing.T, addr string) {
	client := redis.NewClient(&redis.Options{Addr: addr})
	s, err := redisstore.New(client, redisstore.WithLogger(nil), redisstore.WithPrefix(holderPrefix))
	if err != nil {
		t.Fatal(err)
	}
	l := limiter(t, s, inFlightPlan)
	for range 5 {
		take(t, l, context.Background(), "t", true)
	}
	fmt.Println("holding")
	io.Copy(io.Discard, os.Stdin)
	t.Fatal("the test that started this replica ended without killing it")
}
