package memory

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// TestRuleDecidesAsGCRA checks the store's decision against tollgate.GCRA
// over random limits, costs, states and times, including states whose scale
// and flag bits are set, which must not change the decision.
func TestRuleDecidesAsGCRA(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	rates := []float64{1e6, 1000, 200, 3, 2, 1, 0.5, 1.0 / 3600, 1e-3}
	for i := 0; i < 200_000; i++ {
		limit := tollgate.Limit{Rate: rates[rng.IntN(len(rates))], Burst: 1 + rng.Int64N(5000)}
		if limit.Validate() != nil {
			continue
		}
		cost := 1 + rng.Int64N(limit.Burst)
		r, err := newRule(limit, cost)
		if err != nil {
			t.Fatalf("newRule(%v, %d): %v", limit, cost, err)
		}
		now := rng.Int64N(1 << 40)
		tat := now + rng.Int64N(2*r.tolerance+2) - r.tolerance/2
		tat = max(tat, 0)
		scale := scaleOf(rng.Int64N(1 << 52))
		if rng.IntN(2) == 0 {
			scale |= throttledBit
		}
		next, got := r.take(scale|tat, now, cost)
		wantTAT, want := tollgate.GCRA(tat, now, limit, cost)
		if got != want {
			t.Fatalf("limit %v cost %d tat %d now %d: got %+v, GCRA %+v", limit, cost, tat, now, got, want)
		}
		switch {
		case want.Allowed && next != r.scale|wantTAT:
			t.Fatalf("allowed: stored word %x, want %x", next, r.scale|wantTAT)
		case !want.Allowed && next != scale|tat|throttledBit:
			t.Fatalf("denied: the word went from %x to %x, want only the flag set", scale|tat, next)
		}
	}
}

// FuzzNewRule checks that newRule accepts exactly what Validate and
// CheckCost accept, with their errors, and decides as GCRA.
func FuzzNewRule(f *testing.F) {
	f.Add(2.0, int64(20), int64(1), int64(0), int64(0))
	f.Add(1e6, int64(3_153_600_000_000_000), int64(1), int64(5), int64(7))
	f.Add(0.1, int64(315_360_000), int64(2), int64(1), int64(3))
	f.Add(math.NaN(), int64(1), int64(1), int64(0), int64(0))
	f.Add(math.Inf(1), int64(1), int64(1), int64(0), int64(0))
	f.Add(3.0, int64(9_460_800_000), int64(3), int64(1<<40), int64(1<<40))
	f.Fuzz(func(t *testing.T, rate float64, burst, cost, tat, now int64) {
		limit := tollgate.Limit{Rate: rate, Burst: burst}
		wantErr := limit.Validate()
		if wantErr == nil {
			wantErr = limit.CheckCost(cost)
		}
		r, err := newRule(limit, cost)
		if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
			t.Fatalf("newRule(%v, %d) = %v, Validate/CheckCost say %v", limit, cost, err, wantErr)
		}
		if err != nil {
			if !errors.Is(err, tollgate.ErrInvalidLimit) && !errors.Is(err, tollgate.ErrCostExceedsBurst) {
				t.Fatalf("error %v wraps neither tollgate error", err)
			}
			return
		}
		if r.scale < 0 || r.tolerance >= 1<<53 {
			t.Fatalf("limit %v: tolerance %d, scale %x outside a word's room", limit, r.tolerance, r.scale)
		}
		now = clamp(now)
		tat = min(max(tat, 0), now+r.tolerance)
		_, got := r.take(tat, now, cost)
		if _, want := tollgate.GCRA(tat, now, limit, cost); got != want {
			t.Fatalf("limit %v cost %d tat %d now %d: got %+v, GCRA %+v", limit, cost, tat, now, got, want)
		}
	})
}

// TestScaleOf checks that a scale code stands for a tolerance at least as
// long as the one it was made from and less than a quarter longer.
func TestScaleOf(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	check := func(tol int64) {
		w := scaleOf(tol)
		if w < 0 || w&(tatMask|throttledBit) != 0 {
			t.Fatalf("scaleOf(%d) = %x spills out of its bits", tol, w)
		}
		scale := 1 / invScales[uint64(w)>>scaleShift]
		if scale < float64(tol) || tol >= 4 && scale >= 1.25*float64(tol) {
			t.Fatalf("scaleOf(%d) stands for %v", tol, scale)
		}
	}
	for tol := int64(1); tol < 5000; tol++ {
		check(tol)
	}
	for range 100_000 {
		check(1 + rng.Int64N(1<<53-1))
	}
	check(1<<53 - 1)
}

// TestSpentOrdersBuckets checks the eviction estimate on buckets of very
// different plans: what counts is the share of the burst, not the time.
func TestSpentOrdersBuckets(t *testing.T) {
	now := int64(1e12)
	word := func(limit tollgate.Limit, tokensSpent int64) int64 {
		r, err := newRule(limit, 1)
		if err != nil {
			t.Fatal(err)
		}
		return r.scale | now + tokensSpent*r.interval
	}
	slowOneRequest := spent(word(tollgate.Limit{Rate: 100.0 / 3600, Burst: 100}, 1), now) // 36 s to full
	fastDrained := spent(word(tollgate.Limit{Rate: 200, Burst: 2000}, 2000), now)         // 10 s to full
	if !(slowOneRequest < 0.02 && fastDrained > 0.8 && fastDrained <= 1) {
		t.Fatalf("spent: one request of 100 = %v, a drained bucket = %v", slowOneRequest, fastDrained)
	}
	if c := classOf(0, word(tollgate.Limit{Rate: 2, Burst: 20}, 10), now); c < protectedClass {
		t.Fatalf("a half-spent bucket is in class %d, below the protected %d", c, protectedClass)
	}
	if c := classOf(0, word(tollgate.Limit{Rate: 2, Burst: 20}, 7), now); c >= protectedClass {
		t.Fatalf("a bucket with 7 of 20 spent is in class %d, protected", c)
	}
	if got := spent(word(tollgate.Limit{Rate: 2, Burst: 20}, 0), now); got != 0 {
		t.Fatalf("a full bucket is %v spent", got)
	}
}

// TestRuleCache checks that a cached rule is the rule newRule makes, that a
// cost the limit cannot allow fails as newRule fails it after the limit was
// cached, that more limits than the cache has entries each get their own
// rule, and that Takes over all of them allocate nothing once each was seen.
func TestRuleCache(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var c ruleCache
	limits := make([]tollgate.Limit, 4*ruleCacheSize)
	for i := range limits {
		limits[i] = tollgate.Limit{Rate: float64(1 + rng.IntN(1000)), Burst: 1 + rng.Int64N(5000)}
	}
	for round := range 2 {
		for _, l := range limits {
			cost := 1 + rng.Int64N(l.Burst)
			got, err := c.get(l, cost)
			want, _ := newRule(l, cost)
			if err != nil || got != want {
				t.Fatalf("round %d: get(%v, %d) = %+v, %v; want %+v", round, l, cost, got, err, want)
			}
			for _, bad := range []int64{0, -1, l.Burst + 1, math.MaxInt64} {
				_, err := c.get(l, bad)
				_, wantErr := newRule(l, bad)
				if err == nil || err.Error() != wantErr.Error() {
					t.Fatalf("get(%v, %d): %v, want %v", l, bad, err, wantErr)
				}
			}
		}
	}
	for _, bad := range []tollgate.Limit{{Rate: math.NaN(), Burst: 1}, {Rate: math.Inf(1), Burst: 1}, {Rate: 1, Burst: 0}, {Rate: -1, Burst: 5}} {
		for range 2 {
			if _, err := c.get(bad, 1); err == nil {
				t.Fatalf("get(%v, 1) = nil error", bad)
			}
		}
	}
	s := New(WithSweepInterval(0))
	defer s.Close()
	ctx := context.Background()
	for _, l := range limits {
		s.Take(ctx, "tenant", l, 1)
	}
	i := 0
	if n := testing.AllocsPerRun(1000, func() {
		s.Take(ctx, "tenant", limits[i%len(limits)], 1)
		i++
	}); n != 0 {
		t.Fatalf("Take allocates %v times a call over %d limits", n, len(limits))
	}
}
