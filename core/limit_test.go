package tollgate_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
)

func TestLimitValidateNamesTheField(t *testing.T) {
	cases := []struct {
		limit tollgate.Limit
		field string
	}{
		{tollgate.Limit{Rate: 0, Burst: 1}, "Rate"},
		{tollgate.Limit{Rate: -2, Burst: 1}, "Rate"},
		{tollgate.Limit{Rate: math.NaN(), Burst: 1}, "Rate"},
		{tollgate.Limit{Rate: math.Inf(1), Burst: 1}, "Rate"},
		{tollgate.Limit{Rate: 2e6, Burst: 1}, "Rate"},
		{tollgate.Limit{Rate: 1, Burst: 0}, "Burst"},
		{tollgate.Limit{Rate: 1, Burst: -5}, "Burst"},
		{tollgate.Limit{Rate: 1e-9, Burst: 1000}, "Burst/Rate"},
	}
	for _, c := range cases {
		err := c.limit.Validate()
		if !errors.Is(err, tollgate.ErrInvalidLimit) {
			t.Errorf("%+v: err = %v, want ErrInvalidLimit", c.limit, err)
			continue
		}
		if !strings.Contains(err.Error(), c.field) {
			t.Errorf("%+v: %q does not name %s", c.limit, err, c.field)
		}
	}
	for _, p := range tollgate.DefaultPlans() {
		if err := p.Validate(); err != nil {
			t.Errorf("default plan %s: %v", p.Name, err)
		}
	}
}

func TestCheckCost(t *testing.T) {
	l := tollgate.Limit{Rate: 1, Burst: 10}
	if err := l.CheckCost(10); err != nil {
		t.Errorf("cost == Burst: %v", err)
	}
	if err := l.CheckCost(0); !errors.Is(err, tollgate.ErrInvalidLimit) || !strings.Contains(err.Error(), "cost") {
		t.Errorf("cost 0: %v", err)
	}
	err := l.CheckCost(11)
	if !errors.Is(err, tollgate.ErrCostExceedsBurst) || !strings.Contains(err.Error(), "never") {
		t.Errorf("cost 11 > Burst 10: %v, want an error saying it can never be allowed", err)
	}
}

func TestTokenInterval(t *testing.T) {
	cases := []struct {
		rate float64
		want int64
	}{
		{2, 500_000}, {10, 100_000}, {200, 5_000}, {0.1, 10_000_000}, {3, 333_334}, {1e6, 1}, {1.0 / 60, 60_000_000},
	}
	for _, c := range cases {
		if got := (tollgate.Limit{Rate: c.rate, Burst: 1}).TokenInterval(); got != c.want {
			t.Errorf("rate %v: interval %dus, want %d", c.rate, got, c.want)
		}
	}
	if w := freePlan.Limit.Window(); w != 10*time.Second {
		t.Errorf("free window %v, want 10s", w)
	}
}

// FuzzGCRA checks the invariants of the algorithm for any state, time, limit
// and cost: a denial leaves the state alone, the figures are within range,
// and an allowed request moves the state forward by exactly its cost.
func FuzzGCRA(f *testing.F) {
	f.Add(int64(0), int64(1), 2.0, int64(20), int64(1))
	f.Add(int64(5_000_000), int64(1), 3.0, int64(3), int64(3))
	f.Add(int64(-7), int64(1<<40), 0.5, int64(7), int64(2))
	f.Fuzz(func(t *testing.T, tat, now int64, rate float64, burst, cost int64) {
		limit := tollgate.Limit{Rate: rate, Burst: burst}
		if limit.Validate() != nil || limit.CheckCost(cost) != nil {
			return
		}
		// Keep times in the range real clocks produce (µs).
		if now < 0 || now > 1<<53 || tat < -1<<53 || tat > now+int64(tollgate.MaxWindow/time.Microsecond) {
			return
		}
		interval := limit.TokenInterval()
		newTAT, r := tollgate.GCRA(tat, now, limit, cost)
		if r.Remaining < 0 || r.Remaining > burst {
			t.Fatalf("remaining %d outside [0, %d]", r.Remaining, burst)
		}
		if r.ResetAfter < 0 || r.ResetAfter > time.Duration(max(burst*interval, tat-now+cost*interval))*time.Microsecond {
			t.Fatalf("reset after %v outside the window", r.ResetAfter)
		}
		if r.Allowed {
			if r.RetryAfter != 0 {
				t.Fatalf("allowed with RetryAfter %v", r.RetryAfter)
			}
			if want := max(tat, now) + cost*interval; newTAT != want {
				t.Fatalf("new TAT %d, want %d", newTAT, want)
			}
			return
		}
		if r.RetryAfter <= 0 {
			t.Fatalf("denied with RetryAfter %v", r.RetryAfter)
		}
		if r.Remaining >= cost {
			t.Fatalf("denied a cost of %d with %d tokens remaining", cost, r.Remaining)
		}
		// Waiting RetryAfter must be exactly enough.
		later := now + int64(r.RetryAfter/time.Microsecond)
		if _, again := tollgate.GCRA(tat, later, limit, cost); !again.Allowed {
			t.Fatalf("still denied after RetryAfter %v", r.RetryAfter)
		}
		if _, early := tollgate.GCRA(tat, later-1, limit, cost); early.Allowed {
			t.Fatalf("allowed before RetryAfter %v", r.RetryAfter)
		}
	})
}
