package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate-go/tollgate/core/redisstore"
	"github.com/tollgate-go/tollgate/examples/internal/launch"
	"github.com/tollgate-go/tollgate/internal/testredis"
)

// bin is the example's binary, built once by TestMain.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tollgate-grpc-example-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	bins, err := launch.Build(ctx, dir, "grpc")
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	bin = bins["grpc"]
	code := testredis.Run(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// command returns the example run with args, with this process's
// environment less ADDR and REDIS_URL, plus env.
func command(ctx context.Context, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ADDR=") && !strings.HasPrefix(kv, "REDIS_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// runDemo runs the example, server and client, and returns its stdout and
// stderr.
func runDemo(t *testing.T, env []string, args ...string) (stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := command(ctx, env, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %v\nstdout:\n%s\nstderr:\n%s", cmd.Args, err, out.String(), errOut.String())
	}
	return out.String(), errOut.String()
}

// unique returns a tenant that no other test or run uses; it is on the free
// plan (burst 20, 2 tokens a second).
func unique(name string) string {
	return fmt.Sprintf("e2e-grpc-%s-%d", name, time.Now().UnixNano())
}

// checkStory checks the client's account of 21 Hello calls as tenant: the
// 21st is refused, waits the second that RetryInfo gives, and then passes.
func checkStory(t *testing.T, tenant, stdout string) {
	t.Helper()
	for _, want := range []string{
		"Check           no tenant: SERVING (not limited)",
		"Hello           no tenant: Unauthenticated: no tenant: authenticate first",
		`Hello 20        OK "hello, ` + tenant + `", ratelimit: "free";r=0;t=1`,
		"Hello 21        ResourceExhausted: rate limit exceeded (free): retry in 1s; waiting 1s, as its RetryInfo says",
		"done: 21 calls answered, 0 given up; 1 refusals retried after their RetryInfo delay (1s waited)",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if n := strings.Count(stdout, `OK "hello, `+tenant+`"`); n != 21 {
		t.Errorf("%d Hello calls answered, want 21:\n%s", n, stdout)
	}
}

// checkThrottleLog checks that the server logged the refused call as a JSON
// line naming the tenant, its plan and the route.
func checkThrottleLog(t *testing.T, tenant, logs string) {
	t.Helper()
	for _, line := range strings.Split(logs, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil || m["msg"] != "request throttled" {
			continue
		}
		if m["tenant_id"] == tenant && m["plan"] == "free" && m["route"] == helloMethod && m["method"] == "POST" {
			return
		}
		t.Errorf("throttle line %s: want tenant %s, plan free, route %s", line, tenant, helloMethod)
		return
	}
	t.Errorf("no throttle line in the server's log:\n%s", logs)
}

func TestDemo(t *testing.T) {
	t.Parallel()
	tenant := unique("memory")
	began := time.Now()
	stdout, stderr := runDemo(t, nil, "-tenant", tenant, "-hellos", "21", "-reports", "0")
	checkStory(t, tenant, stdout)
	checkThrottleLog(t, tenant, stderr)
	if !strings.Contains(stderr, `"store":"memory"`) {
		t.Errorf("the server does not say it keeps limits in memory:\n%s", stderr)
	}
	if elapsed := time.Since(began); elapsed < time.Second {
		t.Errorf("the run took %v: the client did not wait the RetryInfo delay", elapsed)
	}
}

func TestDemoOnRedis(t *testing.T) {
	t.Parallel()
	tenant := unique("redis")
	// The tests' own Redis (a throwaway redis-server, or the one
	// TOLLGATE_TEST_REDIS names); the example keeps the tenant's buckets
	// under the store's default prefix and its hash tag, and an epoch key
	// beside them (to notice a Redis that lost its data), which goes once
	// the example has exited.
	addr := testredis.Shared(t)
	prefix := redisstore.DefaultPrefix + "{" + tenant + "}"
	t.Cleanup(func() {
		for _, p := range []string{prefix, redisstore.DefaultPrefix + "{#epoch}"} {
			if _, err := testredis.DeleteKeys(addr, p); err != nil {
				t.Error(err)
			}
		}
	})

	stdout, stderr := runDemo(t, []string{"REDIS_URL=redis://" + addr + "/0"}, "-tenant", tenant, "-hellos", "21", "-reports", "0")
	checkStory(t, tenant, stdout)
	checkThrottleLog(t, tenant, stderr)
	// The bucket is in Redis, where every replica would find it.
	keys, err := testredis.Keys(addr, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) == 0 {
		t.Errorf("no Redis key starts with %s: the limits were not kept in Redis\n%s", prefix, stderr)
	}
}

// TestServeAndConnect runs the server and the client as two processes, the
// way they run against an external client or server.
func TestServeAndConnect(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := command(ctx, []string{"ADDR=127.0.0.1:0"}, "-serve")
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	srv.Stderr = &stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Process.Kill() // by its own PID; a no-op once it has exited

	// The server's log is JSON on stdout; wait for the address.
	lines := bufio.NewScanner(stdout)
	var addr string
	var log strings.Builder
	for addr == "" && lines.Scan() {
		log.WriteString(lines.Text() + "\n")
		var m map[string]any
		if json.Unmarshal(lines.Bytes(), &m) == nil && m["msg"] == "listening" {
			addr, _ = m["addr"].(string)
		}
	}
	if addr == "" {
		t.Fatalf("the server never said where it listens:\n%s%s", log.String(), stderr.String())
	}
	done := make(chan struct{})
	go func() {
		for lines.Scan() {
			log.WriteString(lines.Text() + "\n")
		}
		close(done)
	}()

	tenant := unique("connect")
	out, _ := runDemo(t, nil, "-connect", addr, "-tenant", tenant, "-hellos", "21", "-reports", "0")
	checkStory(t, tenant, out)
	if strings.Contains(out, "server listening") {
		t.Errorf("-connect started a server of its own:\n%s", out)
	}

	if err := srv.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-done
	if err := srv.Wait(); err != nil {
		t.Errorf("the server exited with %v after SIGTERM\n%s%s", err, log.String(), stderr.String())
	}
	checkThrottleLog(t, tenant, log.String())
}

// fakeCall is a unary invoker that refuses the first refusals calls with
// ResourceExhausted and a RetryInfo of delay, and counts the calls.
type fakeCall struct {
	refusals int
	delay    time.Duration
	calls    int
}

func (f *fakeCall) invoke(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
	f.calls++
	if f.calls > f.refusals {
		return nil
	}
	st, err := status.New(codes.ResourceExhausted, "rate limit exceeded").
		WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(f.delay)})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

func TestHonourRetryInfo(t *testing.T) {
	var waits []time.Duration
	record := func(_ string, _ error, d time.Duration) { waits = append(waits, d) }
	for _, tc := range []struct {
		name      string
		refusals  int
		delay     time.Duration
		attempts  int
		maxWait   time.Duration
		wantCalls int
		wantCode  codes.Code
	}{
		{"RetriesAfterTheDelay", 2, time.Millisecond, 5, time.Second, 3, codes.OK},
		{"GivesUpAfterAttempts", 10, time.Millisecond, 3, time.Second, 3, codes.ResourceExhausted},
		{"DoesNotWaitPastMaxWait", 1, time.Hour, 5, time.Second, 1, codes.ResourceExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			waits = nil
			f := &fakeCall{refusals: tc.refusals, delay: tc.delay}
			err := honourRetryInfo(tc.attempts, tc.maxWait, record)(context.Background(), helloMethod, nil, nil, nil, f.invoke)
			if f.calls != tc.wantCalls || status.Code(err) != tc.wantCode {
				t.Errorf("%d calls, %v; want %d, %v", f.calls, err, tc.wantCalls, tc.wantCode)
			}
			if len(waits) != f.calls-1 && tc.wantCode == codes.OK {
				t.Errorf("%d waits reported for %d calls", len(waits), f.calls)
			}
			for _, w := range waits {
				if w != tc.delay {
					t.Errorf("waited %v, want RetryInfo's %v", w, tc.delay)
				}
			}
		})
	}

	t.Run("OtherErrorsAreNotRetried", func(t *testing.T) {
		calls := 0
		invoke := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
			calls++
			return status.Error(codes.ResourceExhausted, "no RetryInfo")
		}
		err := honourRetryInfo(5, time.Second, nil)(context.Background(), helloMethod, nil, nil, nil, invoke)
		if calls != 1 || status.Code(err) != codes.ResourceExhausted {
			t.Errorf("%d calls, %v; want 1 and the refusal", calls, err)
		}
	})

	t.Run("StopsWaitingWhenTheContextEnds", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		f := &fakeCall{refusals: 5, delay: time.Hour}
		onWait := func(string, error, time.Duration) { cancel() }
		err := honourRetryInfo(5, 2*time.Hour, onWait)(ctx, helloMethod, nil, nil, nil, f.invoke)
		if f.calls != 1 || status.Code(err) != codes.ResourceExhausted {
			t.Errorf("%d calls, %v; want 1 and the refusal", f.calls, err)
		}
	})
}
