package redisstore_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/redisstore"
)

// newSlowProxy forwards connections to the main Redis, holding every
// request back by delay, and returns its address.
func newSlowProxy(t *testing.T, delay time.Duration) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", mainRedis)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, up)
			mu.Unlock()
			go io.Copy(c, up)
			go func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					time.Sleep(delay)
					if _, err := up.Write(buf[:n]); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

// TestDoLeavesTheOpAloneAfterGivingUp: a caller whose deadline passed gets
// its error, and the round trip that goes on in the background must not
// write into its Op, which the caller (the Limiter) recycles at once.
func TestDoLeavesTheOpAloneAfterGivingUp(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: newSlowProxy(t, 100*time.Millisecond)})
	defer client.Close()
	direct := newClient(t)
	s := newStore(t, client, redisstore.WithPrefix(testPrefix(t)))
	rules := []tollgate.Rule{{Limit: tollgate.Limit{Rate: 1, Burst: 10}}, {Sub: "day", Quota: tollgate.PerDay(100)}}
	op := &tollgate.Op{Kind: tollgate.OpTake, Key: "tenant", Rules: rules, Cost: 1,
		Deadline: time.Now().Add(20 * time.Millisecond), Results: make([]tollgate.Result, 0, 4)}
	if err := s.Do(context.Background(), op); !errors.Is(err, redisstore.ErrUnavailable) {
		t.Fatalf("Do through a 100ms proxy with a 20ms deadline: %v, want ErrUnavailable", err)
	}
	// The caller uses its Op for something else now.
	op.Results = append(op.Results[:0], tollgate.Result{Remaining: -42})
	op.Allowed, op.Key = true, "someone-else"
	// Wait until the abandoned call has been run by Redis, and a little
	// more for its answer to come back through the proxy.
	key := redisstore.PrefixOf(s) + "{tenant}"
	deadline := time.Now().Add(5 * time.Second)
	for direct.Exists(context.Background(), key).Val() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the abandoned call never reached Redis")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if len(op.Results) != 1 || op.Results[0].Remaining != -42 || !op.Allowed || op.Key != "someone-else" {
		t.Errorf("the Op after the late answer: %+v; the store wrote into an Op its caller had taken back", op)
	}
}
