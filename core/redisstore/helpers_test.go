package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core/redisstore"
	"github.com/tollgate-go/tollgate/internal/testredis"
)

// mainRedis is the Redis these tests share: a throwaway redis-server of
// this package's own, or the one TOLLGATE_TEST_REDIS names (testredis).
// TestMain sets it; tests keep their keys under testPrefix.
var mainRedis string

func TestMain(m *testing.M) {
	addr, err := testredis.SharedAddr()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	mainRedis = addr
	os.Exit(testredis.Run(m))
}

func newClient(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: mainRedis})
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("the shared Redis on %s does not answer: %v", mainRedis, err)
	}
	return c
}

// testPrefix returns a key prefix that no other test or run shares; the
// keys under it are deleted from mainRedis when the test ends.
func testPrefix(t testing.TB) string { return testredis.Prefix(t) }

// otherClient hides the concrete client type, so the Store sends one key per
// script call, as it does for a Ring or any wrapper.
type otherClient struct{ redis.UniversalClient }

// scanKeys returns the keys under prefix.
func scanKeys(t testing.TB, c redis.UniversalClient, prefix string) []string {
	t.Helper()
	var keys []string
	ctx := context.Background()
	scan := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for it.Next(ctx) {
			keys = append(keys, it.Val())
		}
		return it.Err()
	}
	var err error
	switch c := c.(type) {
	case *redis.ClusterClient:
		var mu = make(chan struct{}, 1)
		mu <- struct{}{}
		err = c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			<-mu
			defer func() { mu <- struct{}{} }()
			return scan(ctx, n)
		})
	case *redis.Client:
		err = scan(ctx, c)
	default:
		t.Fatalf("scanKeys: unsupported client %T", c)
	}
	if err != nil {
		t.Fatalf("SCAN: %v", err)
	}
	return keys
}

// A countHook counts the script calls a client sends, alone or in
// pipelines, and the round trips that carry them.
type countHook struct {
	decisions  atomic.Int64 // EVALSHA commands: the decisions' script
	scripts    atomic.Int64 // EVALSHA and EVAL commands
	evals      atomic.Int64 // EVAL commands (the script cache was empty)
	roundTrips atomic.Int64
}

func (h *countHook) count(cmds ...redis.Cmder) {
	for _, c := range cmds {
		switch c.Name() {
		case "evalsha":
			h.scripts.Add(1)
			h.decisions.Add(1)
		case "eval":
			h.scripts.Add(1)
			h.evals.Add(1)
		}
	}
}

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		h.roundTrips.Add(1)
		return next(ctx, cmd)
	}
}

func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.count(cmds...)
		h.roundTrips.Add(1)
		return next(ctx, cmds)
	}
}

// newStore returns a Store over client, and deletes every key under its
// prefix when the test ends.
func newStore(t testing.TB, client redis.UniversalClient, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(client, append([]redisstore.Option{redisstore.WithLogger(nil)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	cleanPrefix(t, client, redisstore.PrefixOf(s))
	return s
}

// cleanPrefix deletes every key under prefix when the test ends.
func cleanPrefix(t testing.TB, client redis.UniversalClient, prefix string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		del := func(ctx context.Context, c *redis.Client) error {
			it := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
			for it.Next(ctx) {
				c.Del(ctx, it.Val())
			}
			return it.Err()
		}
		switch c := client.(type) {
		case *redis.ClusterClient:
			_ = c.ForEachMaster(ctx, del)
		case *redis.Client:
			_ = del(ctx, c)
		case otherClient:
			if c, ok := c.UniversalClient.(*redis.Client); ok {
				_ = del(ctx, c)
			}
		}
	})
}

// patient is a context whose deadline is always five seconds away: the
// tests that are not about timeouts must not fail because a shared machine
// stalls for 50ms, the Store's default timeout.
type patient struct{ context.Context }

func (patient) Deadline() (time.Time, bool) { return time.Now().Add(5 * time.Second), true }

var bg context.Context = patient{context.Background()}

// quietLogger drops go-redis's log lines: the failure tests make it log
// every refused connection.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(quietLogger{}) }

// A jitterProbe measures how late the runtime wakes a sleeping goroutine on
// this machine right now, so that timing assertions allow for a loaded
// machine without allowing for a slow store.
type jitterProbe struct {
	worst atomic.Int64
	stop  chan struct{}
	done  chan struct{}
}

func startJitterProbe() *jitterProbe {
	p := &jitterProbe{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			select {
			case <-p.stop:
				return
			default:
			}
			t0 := time.Now()
			time.Sleep(2 * time.Millisecond)
			if late := int64(time.Since(t0) - 2*time.Millisecond); late > p.worst.Load() {
				p.worst.Store(late)
			}
		}
	}()
	return p
}

// Stop stops the probe and returns the latest wake-up it saw.
func (p *jitterProbe) Stop() time.Duration {
	close(p.stop)
	<-p.done
	return time.Duration(p.worst.Load())
}

// waitListening waits until s listens for resets, so that its denial cache
// answers.
func waitListening(t testing.TB, s *redisstore.Store) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !redisstore.Listening(s) {
		if time.Now().After(deadline) {
			t.Fatal("the Store did not subscribe to resets within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}
