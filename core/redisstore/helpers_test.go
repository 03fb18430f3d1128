package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core/redisstore"
)

// mainRedis is the Redis that CI guarantees; these tests never skip
// without it.
const mainRedis = "127.0.0.1:6379"

func newClient(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: mainRedis})
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("these tests need Redis on %s (.ci/run starts one): %v", mainRedis, err)
	}
	return c
}

// testPrefix returns a key prefix that no other test or run shares.
func testPrefix(t testing.TB) string {
	name := strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
	return fmt.Sprintf("tollgate-test:%d:%s:", time.Now().UnixNano(), name)
}

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
	scripts    atomic.Int64 // EVALSHA and EVAL commands
	evals      atomic.Int64 // EVAL commands (the script cache was empty)
	roundTrips atomic.Int64
}

func (h *countHook) count(cmds ...redis.Cmder) {
	for _, c := range cmds {
		switch c.Name() {
		case "evalsha":
			h.scripts.Add(1)
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

func newStore(t testing.TB, client redis.UniversalClient, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// quietLogger drops go-redis's log lines: the failure tests make it log
// every refused connection.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(quietLogger{}) }
