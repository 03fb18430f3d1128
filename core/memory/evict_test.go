package memory_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/core/storekit"
	"github.com/tollgate-go/tollgate/core/storetest"
)

func TestKeyCapEvictsLeastSpent(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0), memory.WithMaxKeys(1000))
	take(t, s, "tenant", limit, 10) // the real tenant, exhausted
	for i := range 5000 {
		take(t, s, fmt.Sprint("fake-", i), limit, 1)
		clock.Advance(time.Microsecond)
		if i%1000 == 0 {
			take(t, s, "tenant", limit, 1) // denied, and still drained
		}
	}
	st := s.Stats()
	if st.Tenants > 1000 || st.Evictions == 0 || st.DrainedEvictions != 0 {
		t.Fatalf("after a flood of 5000 tenants over a cap of 1000: %+v", st)
	}
	if r := take(t, s, "tenant", limit, 1); r.Allowed {
		t.Fatalf("the exhausted tenant was evicted by the flood: %+v", r)
	}
}

func TestIdleTenantsGoBeforeEvictions(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0), memory.WithMaxKeys(500))
	// 200 new tenants a round, ten rounds, every old one idle.
	for round := range 10 {
		for i := range 200 {
			take(t, s, fmt.Sprint("r", round, "-", i), limit, 1)
		}
		clock.Advance(time.Second)
	}
	if st := s.Stats(); st.Evictions != 0 || st.Tenants > 500 {
		t.Fatalf("%+v: evictions although every old tenant was idle", st)
	}
}

// TestKeyCapIsExact checks that the shards' caps add up to the Store's,
// for a cap that the number of shards does not divide.
func TestKeyCapIsExact(t *testing.T) {
	for _, maxKeys := range []int{1, 7, 1001, 20_011} {
		clock := storetest.NewClock()
		s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0), memory.WithMaxKeys(maxKeys))
		n := max(3*maxKeys, 20_000)
		for i := range n {
			take(t, s, fmt.Sprint("k", i), limit, 1)
			if i%1000 == 999 || i == n-1 {
				if got := s.Stats().Tenants; got > int64(maxKeys) {
					t.Fatalf("%d tenants held, the cap is %d", got, maxKeys)
				}
			}
		}
		// Nothing is idle: the Store must be nearly at its cap.
		if got := s.Stats().Tenants; got < int64(maxKeys)*7/8 {
			t.Fatalf("%d tenants held, want close to the cap of %d (%d shards)", got, maxKeys, s.Shards())
		}
	}
}

// A realTenant is a tenant whose state a flood must not reset: after the
// flood, a request of cost probe is denied if and only if the bucket kept
// its state (a fresh bucket would allow it).
type realTenant struct {
	key    string
	limit  tollgate.Limit
	spend  int64 // tokens taken before the flood
	hammer bool  // keeps asking during the flood, and stays drained
	probe  int64
}

func realTenants() []realTenant {
	var ts []realTenant
	enterprise := tollgate.Limit{Rate: 200, Burst: 2000} // 10 s to refill
	free := tollgate.Limit{Rate: 2, Burst: 20}           // 10 s
	startup := tollgate.Limit{Rate: 10, Burst: 100}      // 10 s
	for i := range 40 {
		ts = append(ts, realTenant{fmt.Sprint("throttled-", i), enterprise, 2000, true, 1})
	}
	for i := range 30 {
		// 12 of 20 spent; 0.16 tokens come back during the flood.
		ts = append(ts, realTenant{fmt.Sprint("half-", i), free, 12, false, 9})
	}
	for i := range 30 {
		// 30 of 100 spent; 0.8 come back during the flood.
		ts = append(ts, realTenant{fmt.Sprint("active-", i), startup, 30, false, 75})
	}
	return ts
}

// TestFloodKeepsSpentBuckets floods a Store capped at 4,000 tenants with
// 80,000 one-request tenants, on a plan whose single request leaves a
// bucket 36 s from full, then on one where it leaves it 0.5 s from full,
// while real tenants sit with 10-second buckets drained, half spent or 30 %
// spent. Evicting by time to full would drop the real tenants first; by
// share of the burst spent, they stay.
func TestFloodKeepsSpentBuckets(t *testing.T) {
	clock := storetest.NewClock()
	const maxKeys = 4000
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0), memory.WithMaxKeys(maxKeys))
	tenants := realTenants()
	for _, rt := range tenants {
		if r := take(t, s, rt.key, rt.limit, rt.spend); !r.Allowed {
			t.Fatalf("%s: %+v", rt.key, r)
		}
	}
	slow := tollgate.Limit{Rate: 100.0 / 3600, Burst: 100}
	free := tollgate.Limit{Rate: 2, Burst: 20}
	for i := range 80_000 {
		lim := slow
		if i >= 40_000 {
			lim = free
		}
		if r := take(t, s, fmt.Sprint("flood-", i), lim, 1); !r.Allowed {
			t.Fatalf("flood tenant %d denied: %+v", i, r)
		}
		clock.Advance(time.Microsecond)
		if i%1000 == 0 {
			for _, rt := range tenants {
				// A token comes back every 5 ms; a reset bucket would
				// have 1,999 left.
				if r := take(t, s, rt.key, rt.limit, 1); rt.hammer && r.Remaining > 0 {
					t.Fatalf("%s was reset after %d flood tenants: %+v %+v", rt.key, i, r, s.Stats())
				}
			}
		}
	}
	st := s.Stats()
	t.Logf("after the flood: %+v", st)
	if st.Tenants > maxKeys || st.Evictions == 0 || st.DrainedEvictions != 0 {
		t.Fatalf("after 80,000 tenants over a cap of %d: %+v", maxKeys, st)
	}
	for _, rt := range tenants {
		r := take(t, s, rt.key, rt.limit, rt.probe)
		if rt.hammer && r.Remaining > 0 || !rt.hammer && r.Allowed {
			t.Errorf("%s (%d of %d spent) lost its state to the flood: %+v", rt.key, rt.spend, rt.limit.Burst, r)
		}
	}
}

// TestFloodKeepsExhaustedQuotas: at the cap, a flood of new tenants with
// quotas evicts its own tenants, not the one whose quota is used up (its
// bucket full) nor the one whose bucket is drained.
func TestFloodKeepsExhaustedQuotas(t *testing.T) {
	clock := storetest.NewClockAt(time.Date(2026, 3, 10, 9, 0, 0, 0, time.UTC))
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0), memory.WithMaxKeys(64))
	slow := tollgate.Limit{Rate: 1.0 / 60, Burst: 10} // a token a minute: nothing is full again during the test
	rules := []storekit.Rule{bucket("", slow), quota("day", 20)}
	do(t, s, &storekit.Op{Kind: storekit.Take, Tenant: "exhausted", Rules: rules[1:], Cost: 20})
	do(t, s, &storekit.Op{Kind: storekit.Take, Tenant: "drained", Rules: rules, Cost: 10})
	for i := range 5000 {
		do(t, s, &storekit.Op{Kind: storekit.Take, Tenant: fmt.Sprint("flood-", i), Rules: rules, Cost: 1})
		clock.Advance(time.Millisecond)
	}
	if n := s.Stats().Tenants; n > 64 {
		t.Fatalf("%d tenants held, over the cap of 64", n)
	}
	if op := do(t, s, &storekit.Op{Kind: storekit.Take, Tenant: "exhausted", Rules: rules[1:], Cost: 1}); op.Allowed {
		t.Fatalf("the exhausted quota was evicted: %+v", op.Results)
	}
	if op := do(t, s, &storekit.Op{Kind: storekit.Inspect, Tenant: "drained", Rules: rules, Cost: 1}); op.Results[0].Remaining != 0 || op.Results[1].Remaining != 10 {
		t.Fatalf("the drained tenant was evicted: %+v", op.Results)
	}
	if st := s.Stats(); st.Evictions == 0 || st.DrainedEvictions != 0 {
		t.Fatalf("stats %+v: want evictions, none of a drained tenant", st)
	}
}

// TestFloodWithNothingButDrainedBuckets fills a one-shard Store with
// tenants of a burst of 1, each drained by its one request, so that only
// drained buckets are left to evict: the flood's go, every eviction counts
// as drained, and the cap holds.
func TestFloodWithNothingButDrainedBuckets(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0), memory.WithMaxKeys(100))
	one := tollgate.Limit{Rate: 1.0 / 60, Burst: 1} // a minute to refill
	for i := range 5000 {
		take(t, s, fmt.Sprint("flood-", i), one, 1)
		clock.Advance(time.Millisecond)
	}
	st := s.Stats()
	if st.Tenants > 100 || st.DrainedEvictions == 0 || st.DrainedEvictions != st.Evictions {
		t.Fatalf("every bucket was drained, so every eviction is of a drained one: %+v", st)
	}
}

// TestFloodConcurrent runs a flood from two goroutines past a cap while
// throttled tenants keep asking.
func TestFloodConcurrent(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0), memory.WithMaxKeys(5000))
	tenants := realTenants()
	for _, rt := range tenants {
		take(t, s, rt.key, rt.limit, rt.spend)
	}
	free := tollgate.Limit{Rate: 2, Burst: 20}
	var wg sync.WaitGroup
	var leaked atomic.Int64
	for w := range 2 {
		wg.Go(func() {
			for i := range 30_000 {
				s.Take(context.Background(), fmt.Sprint("flood-", w, "-", i), free, 1)
				if w == 0 {
					clock.Advance(time.Microsecond)
				}
			}
		})
	}
	wg.Go(func() {
		for range 200 {
			for _, rt := range tenants {
				if rt.hammer {
					// The whole test refills 6 tokens at most; a
					// reset bucket has 1,999.
					if r, _ := s.Take(context.Background(), rt.key, rt.limit, 1); r.Remaining > 10 {
						leaked.Add(1)
					}
				}
			}
			runtime.Gosched()
		}
	})
	wg.Wait()
	st := s.Stats()
	if leaked.Load() > 0 || st.DrainedEvictions > 0 || st.Tenants > 5000 || st.Evictions == 0 {
		t.Fatalf("%d requests of throttled tenants found a reset bucket; %+v", leaked.Load(), st)
	}
}

// TestFloodKeepsProbesShort floods a Store at its cap with new IDs: each
// eviction pass leaves tombstones, and new tenants fill the places that
// evictions have not reached. A lookup of an ID the Store does not hold,
// which every request of a flood makes, must stay a few entries long, as
// in a table that was never full. Probes in steps of one from passes that
// all began at the first entry made them 575 entries long here, and 800 at
// the default cap; four turns of the table show it as well as ten.
func TestFloodKeepsProbesShort(t *testing.T) {
	s := memory.New(memory.WithSweepInterval(0), memory.WithMaxKeys(50_000))
	defer s.Close()
	flood := tollgate.Limit{Rate: 10.0 / 3600, Burst: 10}
	worst := 0.0
	for i := range 200_000 {
		if _, err := s.Take(context.Background(), fmt.Sprint("flood-", i), flood, 1); err != nil {
			t.Fatal(err)
		}
		if i%10_000 == 9_999 {
			worst = max(worst, memory.ProbeLength(s))
		}
	}
	t.Logf("a lookup of a new ID reads %.1f entries on average, at worst, over 200,000 IDs at a cap of 50,000", worst)
	if worst > 10 {
		t.Fatalf("a lookup of a new ID reads %.1f entries on average, want at most 10", worst)
	}
}

// TestFloodMemoryIsBounded sends 100,000 made-up tenants, with IDs of up
// to 256 bytes, through a Store capped at 10,000: the heap it holds stays
// that of 10,000 tenants.
func TestFloodMemoryIsBounded(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0), memory.WithMaxKeys(10_000))
	slow := tollgate.Limit{Rate: 1.0 / 60, Burst: 10}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	pad := strings.Repeat("p", 250)
	for i := range 100_000 {
		take(t, s, fmt.Sprint(pad[:i%250], i), slow, 1)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(s)
	st := s.Stats()
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%+v, heap %d bytes, %d a tenant", st, grew, grew/st.Tenants)
	// A tenant kept with a hashed 65-byte ID costs about 200 bytes; a
	// Store that kept every ID would hold over 15 MB.
	if st.Tenants > 10_000 || grew > 5<<20 {
		t.Fatalf("%+v, the heap grew by %d bytes", st, grew)
	}
}

func TestLongKeysHaveBoundedMemory(t *testing.T) {
	s := memory.New(memory.WithSweepInterval(0))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	prefix := strings.Repeat("k", 64<<10)
	for i := range 200 {
		take(t, s, prefix+fmt.Sprint(i), limit, 1)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(s)
	// 200 IDs of 64 KiB would be 12.5 MiB if kept whole.
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 1<<20 {
		t.Fatalf("200 long IDs grew the heap by %d bytes", grew)
	}
	if n := s.Stats().Tenants; n != 200 {
		t.Fatalf("%d tenants, want 200 distinct ones", n)
	}
}

// TestKeysOfOneLengthStayApart checks IDs of every length around the one
// past which IDs are kept hashed, differing in one byte at each position.
func TestKeysOfOneLengthStayApart(t *testing.T) {
	s := memory.New(memory.WithSweepInterval(0))
	lim := tollgate.Limit{Rate: 1, Burst: 2}
	for _, n := range []int{1, 2, 7, 8, 9, 31, 32, 33, 63, 64, 65, 66, 255, 256, 257} {
		base := []byte(strings.Repeat("k", n))
		if r := take(t, s, string(base), lim, 2); !r.Allowed {
			t.Fatalf("%q: %+v", base, r)
		}
		for i := range n {
			other := append([]byte(nil), base...)
			other[i] = 'K'
			if r := take(t, s, string(other), lim, 2); !r.Allowed {
				t.Fatalf("%q shares the bucket of %q", other, base)
			}
		}
		if r := take(t, s, string(base), lim, 1); r.Allowed {
			t.Fatalf("%q lost its bucket", base)
		}
	}
}

// TestSharedHashes fills a Store whose tenant IDs hash to one of four
// values past its cap, sweeps and resets: tenants that share a hash keep
// states of their own, and leave the chain they are in intact.
func TestSharedHashes(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.NewColliding(4, memory.WithClock(clock.Now), memory.WithSweepInterval(0), memory.WithMaxKeys(200))
	for i := range 150 {
		take(t, s, fmt.Sprint("drained-", i), limit, 10)
	}
	for i := range 1000 {
		take(t, s, fmt.Sprint("flood-", i), limit, 1)
	}
	if st := s.Stats(); st.Tenants > 200 || st.DrainedEvictions != 0 {
		t.Fatalf("%+v", st)
	}
	for i := range 150 {
		if r := take(t, s, fmt.Sprint("drained-", i), limit, 1); r.Allowed {
			t.Fatalf("drained-%d lost its state: %+v", i, r)
		}
		if i%3 == 0 {
			do(t, s, &storekit.Op{Kind: storekit.Reset, Tenant: fmt.Sprint("drained-", i)})
		}
	}
	for i := range 150 {
		if r := take(t, s, fmt.Sprint("drained-", i), limit, 1); r.Allowed != (i%3 == 0) {
			t.Fatalf("drained-%d after resets of others: %+v", i, r)
		}
	}
	clock.Advance(time.Second)
	s.Sweep()
	if st := s.Stats(); st.Tenants != 0 {
		t.Fatalf("after a sweep of idle tenants: %+v", st)
	}
}
