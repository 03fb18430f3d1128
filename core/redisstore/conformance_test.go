package redisstore_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/redisstore"
	"github.com/tollgate-go/tollgate/core/storetest"
)

// runConformance runs core's store table against Stores over client, with
// the kit's clock passed to the script, so the timing cases are exact. The
// timeout is generous: these tests are about decisions, not latency.
func runConformance(t *testing.T, client redis.UniversalClient, opts ...redisstore.Option) {
	prefix := testPrefix(t)
	storetest.Run(t, func(t *testing.T, clock *storetest.Clock) tollgate.Store {
		o := append([]redisstore.Option{
			redisstore.WithPrefix(prefix),
			redisstore.WithTestClock(clock.Now),
		}, opts...)
		s, err := redisstore.New(client, o...)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestConformance(t *testing.T) {
	client := newClient(t)
	t.Run("default", func(t *testing.T) { runConformance(t, client) })
	// The script alone, every Take a round trip.
	t.Run("no denial cache", func(t *testing.T) { runConformance(t, client, redisstore.WithDenialCache(0)) })
	// An idle Take makes its own round trip when the client honours
	// context deadlines.
	t.Run("ContextTimeoutEnabled", func(t *testing.T) {
		c := redis.NewClient(&redis.Options{Addr: mainRedis, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		runConformance(t, c, redisstore.WithDenialCache(0))
	})
	// One key per script call in a pipeline, as for a Ring or a wrapped
	// client.
	t.Run("one key per call", func(t *testing.T) {
		runConformance(t, otherClient{client}, redisstore.WithDenialCache(0))
	})
}

// runOps runs the kit's Op checks against Stores over client, with the
// kit's clock passed to the script.
func runOps(t *testing.T, client redis.UniversalClient, opts ...redisstore.Option) {
	prefix := testPrefix(t)
	storetest.RunOps(t, func(t *testing.T, clock *storetest.Clock) tollgate.MultiStore {
		o := append([]redisstore.Option{redisstore.WithPrefix(prefix), redisstore.WithTestClock(clock.Now)}, opts...)
		return newStore(t, client, o...)
	})
}

func TestOps(t *testing.T) {
	client := newClient(t)
	t.Run("default", func(t *testing.T) { runOps(t, client) })
	t.Run("no denial cache", func(t *testing.T) { runOps(t, client, redisstore.WithDenialCache(0)) })
	t.Run("one Op per call", func(t *testing.T) { runOps(t, otherClient{client}, redisstore.WithDenialCache(0)) })
}

// TestOpsFourStores runs the kit's concurrency checks with 64 goroutines
// spread over four Stores, each with a client of its own, on one Redis.
func TestOpsFourStores(t *testing.T) {
	prefix := testPrefix(t)
	clock := storetest.NewClock()
	var stores []tollgate.MultiStore
	for range 4 {
		stores = append(stores, newStore(t, newClient(t), redisstore.WithPrefix(prefix), redisstore.WithTestClock(clock.Now)))
	}
	storetest.RunOpsConcurrency(t, stores, clock)
}
