package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/redisstore"
	"github.com/tollgate-go/tollgate/core/redistest"
	"github.com/tollgate-go/tollgate/core/storekit"
)

// TestCluster runs the Store on a Redis Cluster of three masters: the
// model comparison over many tenants (so over every node), four Stores on
// one tenant without overshoot, and keys whose slot is their tag's.
func TestCluster(t *testing.T) {
	long(t)
	nodes := redistest.StartCluster(t, 3)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.Addrs(nodes)})
	t.Cleanup(func() { client.Close() })

	t.Run("model", func(t *testing.T) {
		steps := randomSteps(11, 400)
		for i := range steps {
			steps[i].op.Tenant += fmt.Sprint("-", i%7) // many slots
			if steps[i].op.Kind == storekit.Cancel {
				steps[i].op.Tenant = steps[steps[i].cancels].op.Tenant
			}
		}
		compareWithModel(t, client, steps)
	})
	t.Run("four stores", func(t *testing.T) {
		prefix := redistest.Prefix(t)
		lim := tollgate.Limit{Rate: 100, Burst: 50}
		var stores []*redisstore.Store
		for range 4 {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.Addrs(nodes)})
			t.Cleanup(func() { c.Close() })
			// A patient timeout: this counts what the stores allow, and
			// a round trip that a busy machine stretches past 50 ms is
			// not the cluster's fault.
			s, err := redisstore.New(c, redisstore.WithPrefix(prefix), redisstore.WithLogger(nil), redisstore.WithTimeout(patientTimeout))
			if err != nil {
				t.Fatal(err)
			}
			stores = append(stores, s)
		}
		var mu sync.Mutex
		allowed := map[string]int{}
		var failed int
		var wg sync.WaitGroup
		start := time.Now()
		for g := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tenant := fmt.Sprint("t", g%4)
				for time.Since(start) < time.Second {
					r, err := stores[g%4].Take(context.Background(), tenant, lim, 1)
					mu.Lock()
					if err != nil {
						failed++
					} else if r.Allowed {
						allowed[tenant]++
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		bound := 50 + int(100*time.Since(start).Seconds())
		t.Logf("4 stores, 32 goroutines, 4 tenants, 1 s: allowed %v (bound %d each), %d errors", allowed, bound, failed)
		for tenant, n := range allowed {
			if n > bound {
				t.Errorf("tenant %s: %d allowed, bound %d", tenant, n, bound)
			}
		}
		if failed > 0 {
			t.Errorf("%d errors", failed)
		}
	})
	t.Run("slots", func(t *testing.T) {
		s := newStore(t, client)
		node := redis.NewClient(&redis.Options{Addr: nodes[0].Addr()})
		defer node.Close()
		ctx := context.Background()
		slot := func(key string) int64 { return node.ClusterKeySlot(ctx, key).Val() }
		for _, tenant := range []string{"acme", "{acme}", "x{acme}y", "}{", "", strings.Repeat("{t}", 100), "日本"} {
			key := s.Key(tenant)
			tag := key[strings.IndexByte(key, '{')+1 : len(key)-1]
			if got, want := slot(key), slot(tag); got != want {
				t.Errorf("tenant %q: key %q is in slot %d, its tag %q in %d", tenant, key, got, tag, want)
			}
		}
		if slot(s.Key("{acme}")) == slot(s.Key("acme")) && slot(s.Key("x{acme}y")) == slot(s.Key("acme")) {
			t.Errorf("tenants that name acme's tag share its slot")
		}
	})
}

// TestClusterSlotMoved: a slot moves to another node; the Store's first
// call to it fails ("moved") and the next ones go to the new node.
func TestClusterSlotMoved(t *testing.T) {
	long(t)
	nodes := redistest.StartCluster(t, 3)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.Addrs(nodes)})
	t.Cleanup(func() { client.Close() })
	s := newStore(t, client)
	ctx := context.Background()
	lim := tollgate.Limit{Rate: 1, Burst: 1000}
	if _, err := s.Take(ctx, "mover", lim, 1); err != nil {
		t.Fatal(err)
	}
	key := s.Key("mover")
	slot := client.ClusterKeySlot(ctx, key).Val()
	owner, err := client.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	client.Del(ctx, key) // a slot moves with its keys; an empty one moves at once
	var target string
	for _, n := range nodes {
		if n.Addr() != owner.Options().Addr {
			c := redis.NewClient(&redis.Options{Addr: n.Addr()})
			target = c.ClusterMyID(ctx).Val()
			c.Close()
			break
		}
	}
	for _, n := range nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr()})
		if err := c.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", target).Err(); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	var kinds []string
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := s.Take(ctx, "mover", lim, 1)
		if err == nil {
			break
		}
		kinds = append(kinds, err.(interface{ ErrorKind() string }).ErrorKind())
		if time.Now().After(deadline) {
			t.Fatalf("calls still fail 5 s after the slot moved: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("calls failed before the new owner answered: %v", kinds)
	for _, k := range kinds {
		if k != "moved" {
			t.Errorf("a call failed with kind %q, want moved", k)
		}
	}
}

// TestRing runs the model comparison on a Ring of two servers.
func TestRing(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr(), "b": b.Addr()}})
	t.Cleanup(func() { ring.Close() })
	steps := randomSteps(5, 300)
	compareWithModel(t, ring, steps)
	if err := check(newStore(t, ring)); err != nil {
		t.Errorf("Check: %v", err)
	}
}
