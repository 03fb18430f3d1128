package storetest

import (
	"fmt"
	"math"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/storekit"
)

// maxBurst and maxWindow are the largest burst and refill window a Limit
// may have (see tollgate.Limit.Validate).
const (
	maxBurst  = 999_999_999_999_999
	maxWindow = 100 * 365 * 24 * time.Hour
)

// extremeLimits returns the Limits at the edges of validity: the largest
// burst refilled over the longest window, the largest burst at the
// highest rate, and one token a century.
func extremeLimits(t *testing.T) []tollgate.Limit {
	// The rate that refills maxBurst in exactly maxWindow, or the least
	// above it that Validate accepts after rounding.
	rate := float64(maxBurst) / maxWindow.Seconds()
	for (tollgate.Limit{Rate: rate, Burst: maxBurst}).Validate() != nil {
		rate = math.Nextafter(rate, math.Inf(1))
	}
	limits := []tollgate.Limit{
		{Rate: rate, Burst: maxBurst},
		{Rate: 1e6, Burst: maxBurst},
		{Rate: 1 / maxWindow.Seconds(), Burst: 1},
		{Rate: 1e6, Burst: 1},
	}
	for _, l := range limits {
		if err := l.Validate(); err != nil {
			t.Fatalf("%v: %v", l, err)
		}
	}
	return limits
}

// runExtremes checks that a store agrees with Model at the extremes of
// the limits: the largest burst, the longest refill window, reservations
// up to the longest MaxDelay, quotas of the largest size, and a clock that
// moves by a century. No figure may overflow.
func runExtremes(t *testing.T, newStore NewStore) {
	limits := extremeLimits(t)
	for i, limit := range limits {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			clock := NewClock()
			store := newStore(t, clock)
			tk := takerOf(t, store)
			var model Model
			key := tenant(t, store, fmt.Sprint("k", i))
			takeLimit := func(cost int64) tollgate.Result {
				t.Helper()
				got, err := tk.Take(ctx(), key, limit, cost)
				if err != nil {
					t.Fatalf("Take(cost %d): %v", cost, err)
				}
				if want := modelTake(&model, key, limit, cost, clock.Now()); got != want {
					t.Fatalf("Take(cost %d): got %+v, the model says %+v", cost, got, want)
				}
				return got
			}
			rule := storekit.BucketRule(limit.Rate, limit.Burst)
			rules := []storekit.Rule{rule, quotaRule("month", tollgate.Quota{Tokens: maxBurst, Period: tollgate.Monthly})}
			op := func(kind storekit.Kind, cost int64, maxDelay time.Duration, markOf *twin) twin {
				t.Helper()
				o := storekit.Op{Kind: kind, Tenant: key, Rules: rules, Cost: cost, MaxDelay: maxDelay}
				var modelMark int64
				if markOf != nil {
					o.Mark, modelMark = markOf.got.Mark, markOf.want.Mark
				}
				return do(t, store, &model, clock, o, modelMark, true)
			}
			tol := time.Duration(rule.Tolerance()) * time.Microsecond

			if r := takeLimit(limit.Burst); !r.Allowed || r.Remaining != 0 || r.ResetAfter != tol {
				t.Fatalf("taking the whole burst: %+v, want none left and full in %v", r, tol)
			}
			if r := takeLimit(1); r.Allowed || r.RetryAfter != time.Duration(rule.Interval)*time.Microsecond {
				t.Fatalf("one more: %+v, want a denial for one interval", r)
			}
			// A reservation of half the burst waits half the window.
			half := max(limit.Burst/2, 1)
			res := op(take, half, maxWindow, nil)
			if wait := time.Duration(half*rule.Interval) * time.Microsecond; !res.got.Allowed || res.got.Delay != wait {
				t.Fatalf("reserving %d: allowed %v after %v, want after %v", half, res.got.Allowed, res.got.Delay, wait)
			}
			// The rest of the burst waits for the reservation and its
			// own tokens: beyond the longest MaxDelay for the longest
			// windows.
			rest := max(limit.Burst-half, 1)
			d := op(take, rest, maxWindow, nil)
			if wait := (half + rest) * rule.Interval * int64(time.Microsecond); d.got.Allowed != (wait <= int64(maxWindow)) {
				t.Fatalf("a second burst, %v out: allowed %v after %v", time.Duration(wait), d.got.Allowed, d.got.Delay)
			}
			op(inspect, limit.Burst, 0, nil)
			op(cancel, half, 0, &res)
			if r := takeLimit(1); r.Allowed {
				t.Fatalf("the cancel gave back more than the reservation: %+v", r)
			}
			// A century on, the long windows are partly refilled.
			clock.Advance(maxWindow)
			takeLimit(1)
			op(take, min(limit.Burst, maxBurst/3), maxWindow, nil)
			op(take, limit.Burst, maxWindow, nil)
			op(inspect, 1, 0, nil)
			clock.Advance(maxWindow) // two centuries in all: a Clock counts up to 292 years
			op(take, limit.Burst, 0, nil)
			op(reset, 1, 0, nil)
			op(take, limit.Burst, maxWindow, nil)
		})
	}
}
