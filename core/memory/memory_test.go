package memory_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/core/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clock *storetest.Clock) tollgate.Store {
		s := memory.New(memory.WithClock(clock.Now))
		t.Cleanup(func() { s.Close() })
		return s
	})
}

var limit = tollgate.Limit{Rate: 10, Burst: 10} // full again 1s after the last take

func take(t *testing.T, s *memory.Store, key string, cost int64) tollgate.Result {
	t.Helper()
	r, err := s.Take(context.Background(), key, limit, cost)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSweepDropsOnlyFullBuckets(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0))
	for i := 0; i < 1000; i++ {
		take(t, s, fmt.Sprint("idle-", i), 1) // full again after 100ms
	}
	take(t, s, "busy", 10) // full again after 1s
	clock.Advance(500 * time.Millisecond)
	if n := s.Sweep(); n != 1000 {
		t.Fatalf("Sweep dropped %d buckets, want the 1000 full ones", n)
	}
	if st := s.Stats(); st.Keys != 1 || st.Evictions != 0 {
		t.Fatalf("after the sweep %+v, want 1 key and no evictions", st)
	}
	// The busy bucket kept its state; a swept one is the full bucket it was.
	if r := take(t, s, "busy", 6); r.Allowed || r.Remaining != 5 {
		t.Fatalf("busy bucket after the sweep: %+v, want 5 tokens left", r)
	}
	if r := take(t, s, "idle-7", 10); !r.Allowed {
		t.Fatalf("swept bucket is not full: %+v", r)
	}
}

func TestKeyCapEvictsLeastSpent(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0), memory.WithMaxKeys(1000))
	take(t, s, "tenant", 10) // the real tenant, exhausted first...
	clock.Advance(time.Millisecond)
	take(t, s, "tenant", 1) // ...and still active: its TAT is the latest
	for i := 0; i < 5000; i++ {
		take(t, s, fmt.Sprint("fake-", i), 1)
		clock.Advance(time.Microsecond)
		if i%1000 == 0 {
			take(t, s, "tenant", 1) // denied, but keeps the bucket ahead of the flood
		}
	}
	st := s.Stats()
	if st.Keys > 1000 {
		t.Fatalf("%d keys tracked, cap is 1000", st.Keys)
	}
	if st.Evictions == 0 {
		t.Fatal("no evictions counted for a flood of 5000 keys over a cap of 1000")
	}
	if r := take(t, s, "tenant", 1); r.Allowed {
		t.Fatalf("the exhausted tenant was evicted by the flood of fake keys: %+v", r)
	}
}

func TestFullBucketsGoBeforeEvictions(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0), memory.WithMaxKeys(500))
	// 200 new keys a round: far below the cap of each of the 4 shards
	// (125) however they hash, but ten rounds hold 2,000 in all.
	for round := 0; round < 10; round++ {
		for i := 0; i < 200; i++ {
			take(t, s, fmt.Sprint("r", round, "-", i), 1)
		}
		clock.Advance(time.Second) // every bucket is full again
	}
	if st := s.Stats(); st.Evictions != 0 {
		t.Fatalf("%d evictions although every old bucket was full: %+v", st.Evictions, st)
	}
}

func TestLongKeysHaveBoundedMemory(t *testing.T) {
	s := memory.New(memory.WithSweepInterval(0))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	prefix := strings.Repeat("k", 64<<10)
	for i := 0; i < 200; i++ {
		key := prefix + fmt.Sprint(i)
		if r, err := s.Take(context.Background(), key, limit, 1); err != nil || !r.Allowed {
			t.Fatal(r, err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(s)
	// 200 keys of 64 KiB would be 12.5 MiB if kept whole.
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 1<<20 {
		t.Fatalf("200 long keys grew the heap by %d bytes", grew)
	}
	if s.Stats().Keys != 200 {
		t.Fatalf("%d keys, want 200 distinct buckets", s.Stats().Keys)
	}
}

// TestChurn runs takes on a hot key while other goroutines flood new keys
// past the cap and sweep, and checks the hot key is never over-granted.
func TestChurn(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0), memory.WithMaxKeys(2000))
	hot := tollgate.Limit{Rate: 1000, Burst: 100}
	var allowed atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				runtime.Gosched() // leave room for the goroutine that moves the clock
				if w < 4 {
					if r, _ := s.Take(context.Background(), "hot", hot, 1); r.Allowed {
						allowed.Add(1)
					}
				} else {
					s.Take(context.Background(), fmt.Sprint(w, "-", i), limit, 1)
					if i%500 == 0 {
						s.Sweep()
					}
				}
			}
		}()
	}
	var advanced time.Duration
	for i := 0; i < 200; i++ {
		time.Sleep(100 * time.Microsecond) // let the workers run; the store's time is the clock's
		clock.Advance(time.Millisecond)
		advanced += time.Millisecond
	}
	close(stop)
	wg.Wait()
	ceiling := hot.Burst + int64(hot.Rate*advanced.Seconds())
	if got := allowed.Load(); got > ceiling {
		t.Fatalf("hot key allowed %d, ceiling %d", got, ceiling)
	}
	if st := s.Stats(); st.Keys > 2000 {
		t.Fatalf("%d keys over the cap of 2000", st.Keys)
	}
}

func TestCloseStopsSweeperAndStoreStillWorks(t *testing.T) {
	s := memory.New(memory.WithSweepInterval(time.Millisecond))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s.Close() // twice is fine
	if r := take(t, s, "k", 1); !r.Allowed {
		t.Fatal(r)
	}
}

func TestInvalidOptionsFailCheckAndTake(t *testing.T) {
	cases := []struct {
		opts []memory.Option
		want string
	}{
		{[]memory.Option{memory.WithMaxKeys(0)}, "memory: WithMaxKeys must be >= 1, got 0"},
		{[]memory.Option{memory.WithMaxKeys(-3)}, "memory: WithMaxKeys must be >= 1, got -3"},
		{[]memory.Option{memory.WithClock(nil)}, "memory: WithClock needs a clock, got nil"},
		{[]memory.Option{memory.WithSweepInterval(0), nil}, "memory: option 1 of New is nil"},
		// The first invalid option is the one reported.
		{[]memory.Option{memory.WithMaxKeys(0), memory.WithClock(nil)}, "memory: WithMaxKeys must be >= 1, got 0"},
	}
	for _, c := range cases {
		s := memory.New(c.opts...)
		err := s.Check(context.Background())
		if err == nil || err.Error() != c.want || !errors.Is(err, tollgate.ErrMisconfigured) {
			t.Errorf("Check: %v, want %q wrapping tollgate.ErrMisconfigured", err, c.want)
			continue
		}
		if _, terr := s.Take(context.Background(), "k", limit, 1); terr != err {
			t.Errorf("Take: %v, want Check's error %v", terr, err)
		}
		if _, terr := s.TakeAt(context.Background(), "k", limit, 1, time.Now()); terr != err {
			t.Errorf("TakeAt: %v, want Check's error %v", terr, err)
		}
		if n := s.Sweep(); n != 0 || s.Stats() != (memory.Stats{}) || s.Close() != nil {
			t.Errorf("a misconfigured Store swept %d, has %+v", n, s.Stats())
		}
	}
	if err := memory.New(memory.WithMaxKeys(1), memory.WithSweepInterval(-1)).Check(context.Background()); err != nil {
		t.Fatalf("valid options: Check = %v", err)
	}
}

func TestZeroStoreErrors(t *testing.T) {
	var s memory.Store
	err := s.Check(context.Background())
	if !errors.Is(err, tollgate.ErrMisconfigured) {
		t.Fatalf("the zero Store: Check = %v", err)
	}
	if _, terr := s.Take(context.Background(), "k", limit, 1); !errors.Is(terr, err) {
		t.Fatalf("Take on the zero Store: %v", terr)
	}
	if s.Sweep() != 0 || s.Stats() != (memory.Stats{}) || s.Close() != nil {
		t.Fatal("the zero Store is not inert")
	}
}

// TestKeyCapIsExact checks that the shards' caps add up to the Store's, for
// a cap that the number of shards does not divide.
func TestKeyCapIsExact(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0), memory.WithMaxKeys(1001))
	for i := range 20_000 {
		take(t, s, fmt.Sprint("k", i), 1)
		if i%1000 == 999 {
			if n := s.Stats().Keys; n > 1001 {
				t.Fatalf("%d keys tracked, cap is 1001", n)
			}
		}
	}
	// Nothing is full again: the Store must be nearly at its cap.
	if n := s.Stats().Keys; n < 1001*7/8 {
		t.Fatalf("%d keys tracked, want close to the cap of 1001", n)
	}
}

func TestTakeAllocatesNothing(t *testing.T) {
	s := memory.New(memory.WithSweepInterval(0))
	ctx := context.Background()
	lim := tollgate.Limit{Rate: 100, Burst: 1e9}
	s.Take(ctx, "tenant-1", lim, 1)
	long := strings.Repeat("x", 100)
	s.Take(ctx, long, lim, 1)
	now := time.Now()
	if n := testing.AllocsPerRun(1000, func() {
		s.Take(ctx, "tenant-1", lim, 1)
		s.TakeAt(ctx, "tenant-1", lim, 1, now)
		s.Take(ctx, long, lim, 1)
	}); n != 0 {
		t.Fatalf("%v allocations per Take of a tracked key", n)
	}
}

// TestTakeAtSharesTakesBuckets checks that the two entry points decide on
// the same buckets and, within a few microseconds, the same clock.
func TestTakeAtSharesTakesBuckets(t *testing.T) {
	s := memory.New(memory.WithSweepInterval(0))
	ctx := context.Background()
	lim := tollgate.Limit{Rate: 1, Burst: 5} // nothing refills within the test
	if r, err := s.TakeAt(ctx, "k", lim, 3, time.Now()); err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	// Remaining may be 0 rather than 1 by a microsecond of skew.
	if r, _ := s.Take(ctx, "k", lim, 1); !r.Allowed || r.Remaining > 1 {
		t.Fatalf("Take after TakeAt: %+v, want at most 1 token left", r)
	}
	if r, _ := s.TakeAt(ctx, "k", lim, 2, time.Now()); r.Allowed {
		t.Fatalf("TakeAt after Take: %+v, want a denial", r)
	}
	// A time from before the Store existed is its first instant.
	if r, _ := s.TakeAt(ctx, "old", lim, 5, time.Now().Add(-time.Hour)); !r.Allowed {
		t.Fatalf("TakeAt in the past: %+v", r)
	}
}

// A realTenant is a tenant whose bucket a flood must not reset: after the
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

// TestFloodKeepsSpentBuckets floods a Store capped at 4,000 keys with
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
		if r := take2(t, s, rt.key, rt.limit, rt.spend); !r.Allowed {
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
		if r := take2(t, s, fmt.Sprint("flood-", i), lim, 1); !r.Allowed {
			t.Fatalf("flood key %d denied: %+v", i, r)
		}
		clock.Advance(time.Microsecond)
		if i%1000 == 0 {
			for _, rt := range tenants {
				if rt.hammer {
					// A token comes back every 5 ms; a reset bucket
					// would have 1,999 left.
					if r := take2(t, s, rt.key, rt.limit, 1); r.Remaining > 0 {
						t.Fatalf("%s was reset after %d flood keys: %+v %+v", rt.key, i, r, s.Stats())
					}
				}
			}
		}
	}
	st := s.Stats()
	t.Logf("after the flood: %+v", st)
	if st.Keys > maxKeys || st.Evictions == 0 {
		t.Fatalf("after 80,000 keys over a cap of %d: %+v", maxKeys, st)
	}
	if st.DrainedEvictions != 0 {
		t.Fatalf("%d drained buckets evicted while one-request buckets were there", st.DrainedEvictions)
	}
	for _, rt := range tenants {
		r := take2(t, s, rt.key, rt.limit, rt.probe)
		if rt.hammer && r.Remaining > 0 || !rt.hammer && r.Allowed {
			t.Errorf("%s (%d of %d spent) lost its state to the flood: %+v", rt.key, rt.spend, rt.limit.Burst, r)
		}
	}
}

// TestFloodWithNothingButDrainedBuckets fills a one-shard Store with
// tenants of a burst of 1, each drained by its one request, so that only
// drained buckets are left to evict: the flood's go, and a tenant that keeps
// asking, and is denied, is kept.
func TestFloodWithNothingButDrainedBuckets(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0), memory.WithMaxKeys(100))
	one := tollgate.Limit{Rate: 1.0 / 60, Burst: 1} // a minute to refill
	take2(t, s, "real", one, 1)
	for i := range 5000 {
		take2(t, s, fmt.Sprint("flood-", i), one, 1)
		clock.Advance(time.Millisecond)
		if i%50 == 0 {
			if r := take2(t, s, "real", one, 1); r.Allowed {
				t.Fatalf("the real tenant was evicted after %d flood keys: %+v", i, s.Stats())
			}
		}
	}
	st := s.Stats()
	if st.Keys > 100 || st.DrainedEvictions == 0 || st.DrainedEvictions != st.Evictions {
		t.Fatalf("every bucket was drained, so every eviction is of a drained one: %+v", st)
	}
}

// TestFloodConcurrent runs a flood from two goroutines past a cap while
// throttled tenants keep asking, under the race detector in CI.
func TestFloodConcurrent(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0), memory.WithMaxKeys(5000))
	tenants := realTenants()
	for _, rt := range tenants {
		take2(t, s, rt.key, rt.limit, rt.spend)
	}
	free := tollgate.Limit{Rate: 2, Burst: 20}
	var wg sync.WaitGroup
	var leaked atomic.Int64
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 30_000 {
				s.Take(context.Background(), fmt.Sprint("flood-", w, "-", i), free, 1)
				if w == 0 {
					clock.Advance(time.Microsecond)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
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
	}()
	wg.Wait()
	st := s.Stats()
	if leaked.Load() > 0 || st.DrainedEvictions > 0 || st.Keys > 5000 || st.Evictions == 0 {
		t.Fatalf("%d requests of throttled tenants found a reset bucket; %+v", leaked.Load(), st)
	}
}

func take2(t *testing.T, s *memory.Store, key string, lim tollgate.Limit, cost int64) tollgate.Result {
	t.Helper()
	r, err := s.Take(context.Background(), key, lim, cost)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestKeysOfOneLengthStayApart checks keys of every length around the ones
// compared as words, differing in one byte at each position.
func TestKeysOfOneLengthStayApart(t *testing.T) {
	s := memory.New(memory.WithSweepInterval(0))
	ctx := context.Background()
	lim := tollgate.Limit{Rate: 1, Burst: 2}
	for n := 1; n <= 20; n++ {
		base := []byte(strings.Repeat("k", n))
		if r, _ := s.Take(ctx, string(base), lim, 2); !r.Allowed {
			t.Fatalf("%q: %+v", base, r)
		}
		for i := range n {
			other := append([]byte(nil), base...)
			other[i] = 'K'
			if r, _ := s.Take(ctx, string(other), lim, 2); !r.Allowed {
				t.Fatalf("%q shares the bucket of %q", other, base)
			}
		}
		if r, _ := s.Take(ctx, string(base), lim, 1); r.Allowed {
			t.Fatalf("%q lost its bucket", base)
		}
	}
}
