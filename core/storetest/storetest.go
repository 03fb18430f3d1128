// Package storetest is a conformance kit for tollgate.Store implementations:
// one table of decisions, with an injected clock, that every Store must make
// exactly as tollgate.GCRA does, plus concurrency and hostile-key checks.
//
// A Store's tests call Run with a function that builds a fresh Store reading
// its time from the given Clock:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T, clock *storetest.Clock) tollgate.Store {
//			return memory.New(memory.WithClock(clock.Now))
//		})
//	}
package storetest

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
)

// A Clock is a manual clock for tests: it stands still until Advance moves
// it. It is safe for concurrent use and takes no lock, so that it does not
// serialise the goroutines of a concurrency test. The zero Clock is not
// usable; call NewClock.
type Clock struct {
	start   time.Time
	elapsed atomic.Int64 // nanoseconds since start
}

// NewClock returns a Clock set to a fixed instant, 2026-01-01 00:00:00 UTC.
func NewClock() *Clock {
	return &Clock{start: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

// Now returns the clock's current time.
func (c *Clock) Now() time.Time {
	return c.start.Add(time.Duration(c.elapsed.Load()))
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.elapsed.Add(int64(d))
}

// A NewStore builds a fresh Store that reads its time from clock. Stores that
// share a backend (Redis) may return a Store over the same backend each time:
// Run gives every case keys of its own.
type NewStore func(t *testing.T, clock *Clock) tollgate.Store

// step is one Take in a case of the decision table.
type step struct {
	advance time.Duration // move the clock before taking
	limit   *tollgate.Limit
	cost    int64
	want    tollgate.Result
	repeat  int // take this many times, each expecting want (0 means once)
}

type decisionCase struct {
	name  string
	limit tollgate.Limit
	steps []step
}

var (
	twoPerSecond = tollgate.Limit{Rate: 2, Burst: 5}   // a token every 500ms, 2.5s to refill
	tenPerSecond = tollgate.Limit{Rate: 10, Burst: 20} // a token every 100ms, 2s to refill
	freePlan     = tollgate.Limit{Rate: 2, Burst: 20}
	enterprise   = tollgate.Limit{Rate: 200, Burst: 2000}
	threePerSec  = tollgate.Limit{Rate: 3, Burst: 3} // not a divisor of a million
)

const ms = time.Millisecond

func allow(remaining int64, reset time.Duration) tollgate.Result {
	return tollgate.Result{Allowed: true, Remaining: remaining, ResetAfter: reset}
}

func deny(remaining int64, retry, reset time.Duration) tollgate.Result {
	return tollgate.Result{Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

var decisionTable = []decisionCase{
	{
		name:  "burst exhaustion",
		limit: twoPerSecond,
		steps: []step{
			{cost: 1, want: allow(4, 500*ms)},
			{cost: 1, want: allow(3, 1000*ms)},
			{cost: 1, want: allow(2, 1500*ms)},
			{cost: 1, want: allow(1, 2000*ms)},
			{cost: 1, want: allow(0, 2500*ms)},
			{cost: 1, want: deny(0, 500*ms, 2500*ms)},
		},
	},
	{
		name:  "refill timing",
		limit: twoPerSecond,
		steps: []step{
			{cost: 5, want: allow(0, 2500*ms)},
			{advance: 499999 * time.Microsecond, cost: 1, want: deny(0, time.Microsecond, 2000*ms+time.Microsecond)},
			{advance: time.Microsecond, cost: 1, want: allow(0, 2500*ms)},
			{advance: 1000 * ms, cost: 1, want: allow(1, 2000*ms)},
			{advance: 10 * time.Second, cost: 1, want: allow(4, 500*ms)},
		},
	},
	{
		name:  "denials take nothing",
		limit: twoPerSecond,
		steps: []step{
			{cost: 5, want: allow(0, 2500*ms)},
			{cost: 1, repeat: 100, want: deny(0, 500*ms, 2500*ms)},
			{advance: 500 * ms, cost: 1, want: allow(0, 2500*ms)},
		},
	},
	{
		name:  "cost greater than one",
		limit: tenPerSecond,
		steps: []step{
			{cost: 10, want: allow(10, 1000*ms)},
			{cost: 10, want: allow(0, 2000*ms)},
			{cost: 10, want: deny(0, 1000*ms, 2000*ms)},
			{advance: 500 * ms, cost: 10, want: deny(5, 500*ms, 1500*ms)},
			{cost: 5, want: allow(0, 2000*ms)},
			{cost: 20, want: deny(0, 2000*ms, 2000*ms)},
			{advance: 2 * time.Second, cost: 20, want: allow(0, 2000*ms)},
		},
	},
	{
		name:  "partial refill",
		limit: tenPerSecond,
		steps: []step{
			{cost: 20, want: allow(0, 2000*ms)},
			{advance: 750 * ms, cost: 1, want: allow(6, 1350*ms)},
			{cost: 7, want: deny(6, 50*ms, 1350*ms)},
			{cost: 6, want: allow(0, 1950*ms)},
		},
	},
	{
		name:  "an idle bucket is a new bucket",
		limit: twoPerSecond,
		steps: []step{
			{cost: 3, want: allow(2, 1500*ms)},
			{advance: 1500 * ms, cost: 1, want: allow(4, 500*ms)},
			{advance: time.Hour, cost: 1, want: allow(4, 500*ms)},
		},
	},
	{
		name:  "upgrade mid-stream refills at the new rate",
		limit: freePlan,
		steps: []step{
			{cost: 20, want: allow(0, 10*time.Second)},
			{cost: 1, want: deny(0, 500*ms, 10*time.Second)},
			// The bucket is empty under either plan; the enterprise
			// rate brings a token back every 5ms.
			{limit: &enterprise, cost: 1, want: deny(0, 5*ms, 10*time.Second)},
			{advance: 5 * ms, limit: &enterprise, cost: 1, want: allow(0, 10*time.Second)},
			{advance: 10 * time.Second, limit: &enterprise, cost: 1, want: allow(1999, 5*ms)},
		},
	},
	{
		name:  "downgrade mid-stream keeps the debt",
		limit: enterprise,
		steps: []step{
			{cost: 1000, want: allow(1000, 5*time.Second)},
			// 5s of refill are owed: under the free plan that is 10
			// tokens of its 20.
			{limit: &freePlan, cost: 1, want: allow(9, 5500*ms)},
			{limit: &freePlan, cost: 10, want: deny(9, 500*ms, 5500*ms)},
		},
	},
	{
		name:  "downgrade below the debt",
		limit: enterprise,
		steps: []step{
			{cost: 2000, want: allow(0, 10*time.Second)},
			// 10s are owed, more than the whole 1s window of the new
			// plan: the bucket is empty until the debt is paid.
			{limit: &threePerSec, cost: 1, want: deny(0, 9333332*time.Microsecond, 10*time.Second)},
			{advance: 9333332 * time.Microsecond, limit: &threePerSec, cost: 1, want: allow(0, 1000002*time.Microsecond)},
		},
	},
	{
		name:  "rate that does not divide a second",
		limit: threePerSec, // 333334us a token
		steps: []step{
			{cost: 3, want: allow(0, 1000002*time.Microsecond)},
			{advance: 333333 * time.Microsecond, cost: 1, want: deny(0, time.Microsecond, 666669*time.Microsecond)},
			{advance: time.Microsecond, cost: 1, want: allow(0, 1000002*time.Microsecond)},
		},
	},
}

// patientContext has a deadline that is always ten seconds away and is
// never done: a Store that applies a default timeout to calls without a
// deadline (the Redis store's is 50ms) must not fail a decision test because
// a shared machine stalled.
type patientContext struct{ context.Context }

func (patientContext) Deadline() (time.Time, bool) { return time.Now().Add(10 * time.Second), true }

func ctx() context.Context { return patientContext{context.Background()} }

// Run runs the whole conformance kit against the Stores that newStore builds.
func Run(t *testing.T, newStore NewStore) {
	t.Run("Decisions", func(t *testing.T) { RunDecisions(t, newStore) })
	t.Run("GCRA", func(t *testing.T) { RunGCRA(t, newStore) })
	t.Run("InvalidInput", func(t *testing.T) { RunInvalidInput(t, newStore) })
	t.Run("HostileKeys", func(t *testing.T) { RunHostileKeys(t, newStore) })
	t.Run("Concurrency", func(t *testing.T) { RunConcurrency(t, newStore) })
}

// keyPrefix keeps the keys of one run apart from those of earlier runs
// against a shared backend.
var keyPrefix = fmt.Sprintf("storetest:%d:", time.Now().UnixNano())

// Key returns a key unique to this test run and the given name.
func Key(t *testing.T, name string) string {
	return keyPrefix + t.Name() + ":" + name
}

// RunDecisions checks the decision table: burst exhaustion, refill timing,
// cost greater than one, remaining and reset figures, and limits that change
// between calls.
func RunDecisions(t *testing.T, newStore NewStore) {
	for _, tc := range decisionTable {
		t.Run(tc.name, func(t *testing.T) {
			clock := NewClock()
			store := newStore(t, clock)
			key := Key(t, "k")
			limit := tc.limit
			for i, s := range tc.steps {
				clock.Advance(s.advance)
				if s.limit != nil {
					limit = *s.limit
				}
				for n := 0; n < max(s.repeat, 1); n++ {
					got, err := store.Take(ctx(), key, limit, s.cost)
					if err != nil {
						t.Fatalf("step %d: Take: %v", i, err)
					}
					if got != s.want {
						t.Fatalf("step %d (take %d): got %+v, want %+v", i, n, got, s.want)
					}
				}
			}
		})
	}
}

// RunGCRA drives a Store and tollgate.GCRA side by side through a long
// pseudo-random sequence of costs, limits and clock steps and checks that
// every decision is the same.
func RunGCRA(t *testing.T, newStore NewStore) {
	clock := NewClock()
	store := newStore(t, clock)
	key := Key(t, "k")
	limits := []tollgate.Limit{twoPerSecond, tenPerSecond, threePerSec, {Rate: 0.5, Burst: 7}, {Rate: 1000, Burst: 1}}
	var tat int64
	start := clock.Now()
	seed := uint64(0x9e3779b97f4a7c15)
	next := func(n uint64) uint64 {
		seed ^= seed << 13
		seed ^= seed >> 7
		seed ^= seed << 17
		return seed % n
	}
	limit := limits[0]
	for i := 0; i < 2000; i++ {
		if next(50) == 0 {
			limit = limits[next(uint64(len(limits)))]
		}
		clock.Advance(time.Duration(next(400_000)) * time.Microsecond)
		cost := 1 + int64(next(uint64(limit.Burst)))
		// The model's clock is relative to the start: GCRA depends on
		// differences only, so any origin gives the same decisions.
		now := clock.Now().Sub(start).Microseconds() + 1
		newTAT, want := tollgate.GCRA(tat, now, limit, cost)
		if want.Allowed {
			tat = newTAT
		}
		got, err := store.Take(ctx(), key, limit, cost)
		if err != nil {
			t.Fatalf("take %d: %v", i, err)
		}
		if got != want {
			t.Fatalf("take %d (limit %v, cost %d): got %+v, GCRA says %+v", i, limit, cost, got, want)
		}
	}
}

// RunInvalidInput checks that invalid limits and costs are errors that name
// the field at fault, and that they take nothing.
func RunInvalidInput(t *testing.T, newStore NewStore) {
	store := newStore(t, NewClock())
	key := Key(t, "k")
	ctx := ctx()
	cases := []struct {
		limit   tollgate.Limit
		cost    int64
		wantErr error
		field   string
	}{
		{tollgate.Limit{Rate: 0, Burst: 5}, 1, tollgate.ErrInvalidLimit, "Rate"},
		{tollgate.Limit{Rate: -1, Burst: 5}, 1, tollgate.ErrInvalidLimit, "Rate"},
		{tollgate.Limit{Rate: 2, Burst: 0}, 1, tollgate.ErrInvalidLimit, "Burst"},
		{twoPerSecond, 0, tollgate.ErrInvalidLimit, "cost"},
		{twoPerSecond, -3, tollgate.ErrInvalidLimit, "cost"},
		{twoPerSecond, 6, tollgate.ErrCostExceedsBurst, "Burst"},
	}
	for _, c := range cases {
		_, err := store.Take(ctx, key, c.limit, c.cost)
		if !errors.Is(err, c.wantErr) {
			t.Errorf("Take(%+v, cost %d): err = %v, want %v", c.limit, c.cost, err, c.wantErr)
			continue
		}
		if !strings.Contains(err.Error(), c.field) {
			t.Errorf("Take(%+v, cost %d): error %q does not name %s", c.limit, c.cost, err, c.field)
		}
	}
	got, err := store.Take(ctx, key, twoPerSecond, 5)
	if err != nil || got != allow(0, 2500*ms) {
		t.Fatalf("after invalid calls the bucket must be untouched: got %+v, %v", got, err)
	}
}

// RunHostileKeys checks that keys of any bytes and length work, and that
// distinct keys, however alike, never share a bucket.
func RunHostileKeys(t *testing.T, newStore NewStore) {
	store := newStore(t, NewClock())
	long := strings.Repeat("x", 1<<20)
	keys := []string{
		"", "\x00", "\x00\x00", "a\x00b", "{", "}", "{tenant}", "{tenant}x", "tenant", "tenant ",
		"tenant\n", "\xff\xfe", "日本語テナント", "%s%d", "../../etc/passwd", "*", "?",
		strings.Repeat("k", 63), strings.Repeat("k", 64), strings.Repeat("k", 65),
		long, long + "y", long[:len(long)-1] + "z",
	}
	ctx := ctx()
	// Exhaust each key in turn; every later key must still be full.
	for i, k := range keys {
		key := Key(t, "") + k
		got, err := store.Take(ctx, key, twoPerSecond, 5)
		if err != nil {
			t.Fatalf("key %d (%d bytes): %v", i, len(key), err)
		}
		if got != allow(0, 2500*ms) {
			t.Fatalf("key %d (%d bytes) shares a bucket with an earlier key: got %+v", i, len(key), got)
		}
		got, err = store.Take(ctx, key, twoPerSecond, 1)
		if err != nil || got.Allowed {
			t.Fatalf("key %d (%d bytes) should be exhausted: got %+v, %v", i, len(key), got, err)
		}
	}
}

// RunConcurrency hammers one key from 64 goroutines. With the clock stopped
// exactly Burst requests must be allowed; with the clock moving, never more
// than Burst + Rate x elapsed.
func RunConcurrency(t *testing.T, newStore NewStore) {
	const workers = 64
	limit := tollgate.Limit{Rate: 100, Burst: 50}
	ctx := ctx()

	t.Run("stopped clock", func(t *testing.T) {
		store := newStore(t, NewClock())
		key := Key(t, "k")
		var allowed, failed atomic.Int64
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 20; i++ {
					r, err := store.Take(ctx, key, limit, 1)
					if err != nil {
						failed.Add(1)
						continue
					}
					if r.Allowed {
						allowed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if failed.Load() > 0 {
			t.Fatalf("%d Takes failed", failed.Load())
		}
		if got := allowed.Load(); got != limit.Burst {
			t.Fatalf("allowed %d of %d requests with the clock stopped, want exactly Burst = %d",
				got, workers*20, limit.Burst)
		}
	})

	t.Run("moving clock", func(t *testing.T) {
		clock := NewClock()
		store := newStore(t, clock)
		key := Key(t, "k")
		var allowed, failed, taken atomic.Int64
		var advanced time.Duration
		var wg sync.WaitGroup
		// Workers wait for permits instead of spinning, so the goroutine
		// that moves the clock is never starved of a CPU.
		permits := make(chan struct{}, workers)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range permits {
					r, err := store.Take(ctx, key, limit, 1+int64(w%3))
					if err != nil {
						failed.Add(1)
					} else if r.Allowed {
						allowed.Add(1 + int64(w%3))
					}
					taken.Add(1)
				}
			}()
		}
		// 2 seconds of store time in 4ms steps, with 32 concurrent
		// Takes in each step.
		const perStep = 32
		for step := int64(1); step <= 500; step++ {
			for range perStep {
				permits <- struct{}{}
			}
			for taken.Load() < step*perStep {
				runtime.Gosched()
			}
			clock.Advance(4 * ms)
			advanced += 4 * ms
		}
		close(permits)
		wg.Wait()
		if failed.Load() > 0 {
			t.Fatalf("%d Takes failed", failed.Load())
		}
		ceiling := limit.Burst + int64(limit.Rate*advanced.Seconds())
		got := allowed.Load()
		if got > ceiling {
			t.Fatalf("allowed %d tokens in %v; Burst + Rate x elapsed is %d", got, advanced, ceiling)
		}
		// Every 4ms step frees 0.4 tokens and workers never stop
		// asking, so nearly all of the budget must have been granted.
		if floor := ceiling * 9 / 10; got < floor {
			t.Fatalf("allowed only %d tokens in %v, want at least %d of %d", got, advanced, floor, ceiling)
		}
		t.Logf("allowed %d of a possible %d tokens", got, ceiling)
	})
}
