package redisstore_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/redisstore"
)

// throttledReplicas returns two Stores, A and B, over clients of their own
// with one prefix, and exhausts tenant's bucket so that B denies it from its
// denial cache, without round trips.
func throttledReplicas(t *testing.T, newClient func() redis.UniversalClient, prefix, tenant string, limit tollgate.Limit) (a, b *redisstore.Store, trips *countHook) {
	t.Helper()
	ca, cb := newClient(), newClient()
	trips = &countHook{}
	cb.(*redis.Client).AddHook(trips)
	a = newStore(t, ca, redisstore.WithPrefix(prefix))
	b = newStore(t, cb, redisstore.WithPrefix(prefix))
	for range limit.Burst {
		if r, err := a.Take(bg, tenant, limit, 1); err != nil || !r.Allowed {
			t.Fatalf("replica A: %+v, %v", r, err)
		}
	}
	if r, err := b.Take(bg, tenant, limit, 1); err != nil || r.Allowed {
		t.Fatalf("replica B: %+v, %v", r, err)
	}
	waitListening(t, b)
	if r, err := b.Take(bg, tenant, limit, 1); err != nil || r.Allowed {
		t.Fatalf("replica B: %+v, %v", r, err)
	}
	before := trips.scripts.Load()
	if r, err := b.Take(bg, tenant, limit, 1); err != nil || r.Allowed {
		t.Fatalf("replica B: %+v, %v", r, err)
	}
	if trips.scripts.Load() != before {
		t.Fatal("replica B asked Redis: its denial cache does not answer")
	}
	return a, b, trips
}

// untilAllowed polls s for tenant every millisecond and returns how long
// it took to be allowed, or fails after timeout.
func untilAllowed(t *testing.T, s *redisstore.Store, tenant string, limit tollgate.Limit, since time.Time, timeout time.Duration) time.Duration {
	t.Helper()
	for {
		r, err := s.Take(bg, tenant, limit, 1)
		if err == nil && r.Allowed {
			return time.Since(since)
		}
		if time.Since(since) > timeout {
			t.Fatalf("still denied %v later: %+v, %v", time.Since(since), r, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// an hour per token: a denial that nothing but a reset or lost data ends.
var slowLimit = tollgate.Limit{Rate: 1.0 / 3600, Burst: 2}

// TestResetReachesReplicas resets a tenant through one replica: the other,
// which denied it from its cache, allows it within 100 ms.
func TestResetReachesReplicas(t *testing.T) {
	a, b, _ := throttledReplicas(t, func() redis.UniversalClient { return newClient(t) }, testPrefix(t), "tenant", slowLimit)
	var worst time.Duration
	for i := range 5 {
		start := time.Now()
		op := &tollgate.Op{Kind: tollgate.OpReset, Key: "tenant", Rules: []tollgate.Rule{{Limit: slowLimit}}}
		if err := a.Do(bg, op); err != nil {
			t.Fatal(err)
		}
		worst = max(worst, untilAllowed(t, b, "tenant", slowLimit, start, 100*time.Millisecond))
		// Empty it again, through B this time, which learns it is empty.
		for {
			r, err := b.Take(bg, "tenant", slowLimit, 1)
			if err != nil {
				t.Fatal(err)
			}
			if !r.Allowed {
				break
			}
		}
		_ = i
	}
	t.Logf("after a reset through another replica, allowed within %v (worst of 5)", worst)
}

// TestDataLoss empties Redis under replicas that deny a tenant from their
// caches: FLUSHDB, and a restart without persistence. Each replica allows
// the tenant again within 100 ms although it sends nothing for it.
func TestDataLoss(t *testing.T) {
	srv := startServer(t)
	newC := func() redis.UniversalClient {
		c := redis.NewClient(&redis.Options{Addr: srv.addr()})
		t.Cleanup(func() { c.Close() })
		return c
	}
	t.Run("FLUSHDB", func(t *testing.T) {
		_, b, _ := throttledReplicas(t, newC, testPrefix(t), "tenant", slowLimit)
		start := time.Now()
		if err := newC().FlushDB(bg).Err(); err != nil {
			t.Fatal(err)
		}
		t.Logf("after FLUSHDB, allowed within %v", untilAllowed(t, b, "tenant", slowLimit, start, 100*time.Millisecond))
	})
	t.Run("restart without persistence", func(t *testing.T) {
		_, b, _ := throttledReplicas(t, newC, testPrefix(t), "tenant", slowLimit)
		start := time.Now()
		srv.kill()
		srv.start()
		up := time.Since(start)
		d := untilAllowed(t, b, "tenant", slowLimit, start, up+100*time.Millisecond)
		t.Logf("Redis back %v after the kill; allowed %v after it was back", up, d-up)
	})
}

// TestFailoverLostWrites moves a replica of the store's Redis to a server
// that missed the writes behind its cached denials (a replica promoted
// before it had them): the store notices within 100 ms, without a request
// for the tenant.
func TestFailoverLostWrites(t *testing.T) {
	primary := startServer(t)
	standby := startServer(t)
	admin := redis.NewClient(&redis.Options{Addr: standby.addr()})
	defer admin.Close()
	if err := admin.ReplicaOf(bg, "127.0.0.1", primaryPort(primary)).Err(); err != nil {
		t.Fatal(err)
	}
	// Both Stores dial whichever server is the master now.
	var master atomic.Value
	master.Store(primary.addr())
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, master.Load().(string))
	}
	newC := func() redis.UniversalClient {
		c := redis.NewClient(&redis.Options{Addr: "failover", Dialer: dial, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		return c
	}
	// The epoch key reaches the standby; then it stops replicating, and
	// misses the tenant's writes.
	prefix := testPrefix(t)
	throttledReplicas(t, newC, prefix, "warm-up", slowLimit)
	waitReplicated(t, admin, primary)
	if err := admin.ReplicaOf(bg, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	_, b, _ := throttledReplicas(t, newC, prefix, "tenant", slowLimit)
	if n, _ := admin.Exists(bg, prefix+"{#epoch}").Result(); n != 1 {
		t.Fatal("the standby lacks the epoch key: this would test a restart, not lost writes")
	}
	start := time.Now()
	master.Store(standby.addr())
	primary.kill()
	t.Logf("after a failover to a server that missed the writes, allowed within %v",
		untilAllowed(t, b, "tenant", slowLimit, start, 100*time.Millisecond))
}

func primaryPort(s *server) string { _, p, _ := net.SplitHostPort(s.addr()); return p }

// waitReplicated waits until the replica behind admin has caught up with
// primary.
func waitReplicated(t *testing.T, admin *redis.Client, primary *server) {
	t.Helper()
	p := redis.NewClient(&redis.Options{Addr: primary.addr()})
	defer p.Close()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		n, err := p.Do(bg, "WAIT", 1, 100).Int()
		if err == nil && n >= 1 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the replica did not catch up")
}
