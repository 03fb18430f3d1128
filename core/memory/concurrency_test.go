package memory_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/core/storekit"
	"github.com/tollgate-go/tollgate/core/storetest"
)

// TestOpsRaceLockFreeTakes: Ops on a bucket and a quota, and Takes of the
// same bucket alone, which take no lock, from 64 goroutines on a stopped
// clock: exactly the burst is allowed in all, and the quota counts exactly
// the Ops allowed.
func TestOpsRaceLockFreeTakes(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0))
	lim := tollgate.Limit{Rate: 10, Burst: 500}
	rules := []storekit.Rule{bucket("", lim), quota("day", 1_000_000)}
	var takes, ops atomic.Int64
	var wg sync.WaitGroup
	for w := range 64 {
		wg.Go(func() {
			ctx := context.Background()
			for range 20 {
				if w%2 == 0 {
					if r, err := s.Take(ctx, "k", lim, 1); err == nil && r.Allowed {
						takes.Add(1)
					}
					continue
				}
				op := &storekit.Op{Kind: storekit.Take, Tenant: "k", Rules: rules, Cost: 1}
				if err := s.Do(ctx, op); err == nil && op.Allowed {
					ops.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got := takes.Load() + ops.Load(); got != lim.Burst {
		t.Fatalf("%d Takes and %d Ops allowed, %d in all; want the burst of %d", takes.Load(), ops.Load(), got, lim.Burst)
	}
	op := do(t, s, &storekit.Op{Kind: storekit.Inspect, Tenant: "k", Rules: rules, Cost: 1})
	if used := 1_000_000 - op.Results[1].Remaining; used != ops.Load() {
		t.Fatalf("the quota counts %d; %d Ops were allowed", used, ops.Load())
	}
}

// TestChurn has goroutines take from a hot tenant, by Take and by Ops of
// two rules, while others flood new tenants past the cap, sweep, and
// reset tenants of their own, the clock moving: the hot tenant is never
// granted more than its limits allow, and the cap holds.
func TestChurn(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0), memory.WithMaxKeys(2000))
	hot := tollgate.Limit{Rate: 1000, Burst: 100}
	rules := []storekit.Rule{bucket("", hot), bucket("b:x", tollgate.Limit{Rate: 1000, Burst: 1000})}
	var allowed atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 8 {
		wg.Go(func() {
			ctx := context.Background()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				runtime.Gosched() // leave room for the goroutine that moves the clock
				switch {
				case w < 2:
					if r, _ := s.Take(ctx, "hot", hot, 1); r.Allowed {
						allowed.Add(1)
					}
				case w < 4:
					op := &storekit.Op{Kind: storekit.Take, Tenant: "hot", Rules: rules, Cost: 1, MaxDelay: time.Duration(w-2) * time.Millisecond}
					if s.Do(ctx, op) == nil && op.Allowed {
						allowed.Add(1)
					}
				default:
					key := fmt.Sprint(w, "-", i)
					s.Do(ctx, &storekit.Op{Kind: storekit.Take, Tenant: key, Rules: rules, Cost: 1})
					if i%7 == 0 {
						s.Do(ctx, &storekit.Op{Kind: storekit.Reset, Tenant: key, Rules: rules[:1]})
					}
					if i%500 == 0 {
						s.Sweep()
					}
				}
			}
		})
	}
	var advanced time.Duration
	for range 200 {
		time.Sleep(100 * time.Microsecond) // let the workers run; the store's time is the clock's
		clock.Advance(time.Millisecond)
		advanced += time.Millisecond
	}
	close(stop)
	wg.Wait()
	// Reservations may run up to 1ms ahead of the clock.
	ceiling := hot.Burst + int64(hot.Rate*(advanced+time.Millisecond).Seconds())
	if got := allowed.Load(); got > ceiling {
		t.Fatalf("the hot tenant was allowed %d, the ceiling is %d", got, ceiling)
	}
	if st := s.Stats(); st.Tenants > 2000 {
		t.Fatalf("%d tenants, over the cap of 2000", st.Tenants)
	}
}

// TestResetRacesTakes resets a tenant while goroutines take from it, by
// Take and by Ops: a reset is atomic, so the tenant is never granted more
// than a burst between two resets, counted from the reset.
func TestResetRacesTakes(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0))
	lim := tollgate.Limit{Rate: 1, Burst: 50}
	rules := []storekit.Rule{bucket("", lim), quota("day", 50)}
	ctx := context.Background()
	for round := range 20 {
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				for range 20 {
					if w%2 == 0 {
						if r, _ := s.Take(ctx, "k", lim, 1); r.Allowed {
							allowed.Add(1)
						}
						continue
					}
					op := &storekit.Op{Kind: storekit.Take, Tenant: "k", Rules: rules, Cost: 1}
					if s.Do(ctx, op) == nil && op.Allowed {
						allowed.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if got := allowed.Load(); got != lim.Burst {
			t.Fatalf("round %d: %d allowed after a reset, want the burst of %d", round, got, lim.Burst)
		}
		do(t, s, &storekit.Op{Kind: storekit.Reset, Tenant: "k", Rules: rules[:1]})
		// A reset during takes: whatever interleaving, at most a burst
		// after it and one before it.
		var during atomic.Int64
		wg.Go(func() {
			for range 100 {
				if r, _ := s.Take(ctx, "k", lim, 1); r.Allowed {
					during.Add(1)
				}
			}
		})
		do(t, s, &storekit.Op{Kind: storekit.Reset, Tenant: "k", Rules: rules[:1]})
		wg.Wait()
		if got := during.Load(); got > 2*lim.Burst {
			t.Fatalf("round %d: %d allowed around a reset, more than two bursts", round, got)
		}
		do(t, s, &storekit.Op{Kind: storekit.Reset, Tenant: "k"})
	}
}

// TestTenantsOfOneShard: tenants that share a shard, found without its
// lock, keep their states apart, and a tenant once dropped (reset, swept
// or evicted) is found no more.
func TestTenantsOfOneShard(t *testing.T) {
	clock := storetest.NewClock()
	// A cap of 100 makes one shard, which every tenant shares.
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0), memory.WithMaxKeys(100))
	take(t, s, "hot", limit, 10)
	if r := take(t, s, "hot", limit, 1); r.Allowed {
		t.Fatalf("the tenant lost its state: %+v", r)
	}
	if r := take(t, s, "other", limit, 10); !r.Allowed {
		t.Fatalf("another tenant of the shard reached the first one's state: %+v", r)
	}
	do(t, s, &storekit.Op{Kind: storekit.Reset, Tenant: "hot"})
	if r := take(t, s, "hot", limit, 10); !r.Allowed {
		t.Fatalf("the tenant survived its reset: %+v", r)
	}
	clock.Advance(time.Second)
	if n := s.Sweep(); n != 2 {
		t.Fatalf("the sweep dropped %d tenants, want both", n)
	}
	// The least spent tenant of its shard, it is the first evicted.
	take(t, s, "hot", limit, 1)
	for i := range 100 {
		take(t, s, fmt.Sprint("drained-", i), limit, 10)
	}
	if r := take(t, s, "hot", limit, 10); !r.Allowed || s.Stats().Evictions == 0 {
		t.Fatalf("the tenant survived its eviction: %+v, %+v", r, s.Stats())
	}
}

// TestBusyTenantReset has goroutines take from one tenant at once, round
// after round, with a reset between rounds: every reset starts a fresh
// burst, and no request takes from a dropped tenant.
func TestBusyTenantReset(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0))
	lim := tollgate.Limit{Rate: 1, Burst: 1000}
	ctx := context.Background()
	for range 20 {
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 500 {
					if r, _ := s.Take(ctx, "k", lim, 1); r.Allowed {
						allowed.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if got := allowed.Load(); got != lim.Burst {
			t.Fatalf("%d allowed from a fresh burst of %d", got, lim.Burst)
		}
		do(t, s, &storekit.Op{Kind: storekit.Reset, Tenant: "k"})
	}
}

// TestInFlightConcurrency: 64 goroutines make requests of one tenant with
// a cap of 5 in flight, 100,000 of them granted, some cancelled or
// panicking: never more than 5 run at once, and no slot is left taken.
func TestInFlightConcurrency(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now))
	defer s.Close()
	storetest.RunInFlight(t, []tollgate.Store{s}, clock, 100_000)
}

// TestTablesGrowAndShrinkUnderTakes has goroutines take from spent tenants
// while another adds tens of thousands of tenants, which makes the shards
// rebuild their tables again and again, and sweeps them, which makes the
// tables shrink: a request that finds no tenant during a rebuild would
// start it afresh, with a full bucket, so not one of the spent tenants'
// requests may be allowed.
func TestTablesGrowAndShrinkUnderTakes(t *testing.T) {
	clock := storetest.NewClock()
	// 32 shards, which the floods fill with 625 tenants each.
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0), memory.WithMaxKeys(100_000))
	ctx := context.Background()
	spent := tollgate.Limit{Rate: 1e-6, Burst: 1} // no token back during the test
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = fmt.Sprint("spent-", i)
		if r, _ := s.Take(ctx, keys[i], spent, 1); !r.Allowed {
			t.Fatal("a fresh tenant was denied")
		}
	}
	var allowed atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 2 {
		wg.Go(func() {
			for i := w; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if r, _ := s.Take(ctx, keys[i%len(keys)], spent, 1); r.Allowed {
					allowed.Add(1)
				}
			}
		})
	}
	flood := tollgate.Limit{Rate: 1000, Burst: 10}
	for round := range 4 {
		for i := range 20_000 {
			s.Take(ctx, fmt.Sprint("flood-", round, "-", i), flood, 1)
		}
		clock.Advance(time.Second) // every flood tenant is idle again
		if n := s.Sweep(); n != 20_000 {
			t.Errorf("round %d: the sweep dropped %d tenants, want the 20,000 of the flood", round, n)
		}
	}
	close(stop)
	wg.Wait()
	if n := allowed.Load(); n > 0 {
		t.Fatalf("%d requests of spent tenants allowed while the tables were rebuilt", n)
	}
	if n := s.Stats().Tenants; n != int64(len(keys)) {
		t.Fatalf("%d tenants held after the floods were swept, want %d", n, len(keys))
	}
}
