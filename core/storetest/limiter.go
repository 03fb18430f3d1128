package storetest

import (
	"math/rand/v2"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/internal/hooks"
	"github.com/tollgate-go/tollgate/core/storekit"
)

// clockLimiter returns a Limiter over store that decides on clock's time
// and gives every tenant plan. A tenant's plan changes when a test moves
// from one such Limiter to another over the same store.
func clockLimiter(t *testing.T, store tollgate.Store, clock *Clock, plan tollgate.Plan) *tollgate.Limiter {
	t.Helper()
	l, err := tollgate.New(store, tollgate.SinglePlan(plan), tollgate.WithLogger(nil), tollgate.WithFailClosed(true),
		hooks.LimiterClock(clock.Now).(tollgate.Option))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// runLimiter checks, through a Limiter on the kit's clock, what its users
// see of a store: a tenant whose plan changes to a day in another time
// zone keeps what it used; Reset clears every policy the tenant had, under
// any plan, but the slots of requests in flight; slots come back on a
// Release, a Cancel or when their lease ends; and the reservations of
// waiters who all give up, in any order, leave the tenant owing nothing.
func runLimiter(t *testing.T, newStore NewStore) {
	t.Run("plan change across time zones", func(t *testing.T) {
		clock := NewClockAt(mustTime(t, "2026-03-10T20:00:00Z"))
		store := newStore(t, clock)
		key := tenant(t, store, "k")
		utc := tollgate.Plan{Name: "utc", Limit: tollgate.Limit{Rate: 100, Burst: 100},
			Policies: []tollgate.Policy{{Quota: daily(200, nil)}}}
		tokyo := tollgate.Plan{Name: "tokyo", Limit: tollgate.Limit{Rate: 100, Burst: 100},
			Policies: []tollgate.Policy{{Quota: daily(200, mustLocation(t, "Asia/Tokyo"))}}}
		l := clockLimiter(t, store, clock, utc)
		mustTake(t, l, tollgate.Request{Tenant: key, Cost: 100}, true)
		clock.Advance(time.Second)
		mustTake(t, l, tollgate.Request{Tenant: key, Cost: 90}, true)
		l = clockLimiter(t, store, clock, tokyo)
		clock.Advance(time.Second)
		// 190 of the day's 200 are used, whatever calendar the day
		// follows.
		if d := mustTake(t, l, tollgate.Request{Tenant: key, Cost: 10}, true); d.Results()[1].Remaining != 0 {
			t.Fatalf("under the Tokyo plan: %+v, want the quota used up", d.Results())
		}
		clock.Advance(time.Second)
		mustTake(t, l, tollgate.Request{Tenant: key}, false)
		// Midnight UTC is not the end of Tokyo's day.
		clock.Set(mustTime(t, "2026-03-11T00:00:01Z"))
		mustTake(t, l, tollgate.Request{Tenant: key}, false)
		clock.Set(mustTime(t, "2026-03-11T15:00:00Z"))
		mustTake(t, l, tollgate.Request{Tenant: key}, true)
	})

	t.Run("reset clears the policies of every plan", func(t *testing.T) {
		clock := NewClock()
		store := newStore(t, clock)
		key := tenant(t, store, "k")
		withBudget := tollgate.Plan{Name: "pro", Limit: tollgate.Limit{Rate: 10, Burst: 100},
			Policies: []tollgate.Policy{
				{Budget: "reports", Limit: tollgate.Limit{Rate: 1.0 / 60, Burst: 5}},
				{Quota: daily(50, nil)},
			}}
		plain := tollgate.Plan{Name: "plain", Limit: tollgate.Limit{Rate: 10, Burst: 100}}
		l := clockLimiter(t, store, clock, withBudget)
		mustTake(t, l, tollgate.Request{Tenant: key, Budget: "reports", Cost: 5}, true)
		mustTake(t, l, tollgate.Request{Tenant: key, Budget: "reports"}, false)
		// Reset under a plan that has neither the budget nor the quota.
		if err := clockLimiter(t, store, clock, plain).Reset(ctx(), key); err != nil {
			t.Fatal(err)
		}
		d := mustTake(t, l, tollgate.Request{Tenant: key, Budget: "reports", Cost: 5}, true)
		if r := d.Results(); r[0].Remaining != 95 || r[1].Remaining != 45 || r[2].Remaining != 0 {
			t.Fatalf("after the reset: %+v, want every policy full before this request", r)
		}
	})

	t.Run("in-flight slots", func(t *testing.T) {
		clock := NewClock()
		store := newStore(t, clock)
		key := tenant(t, store, "k")
		plan := tollgate.Plan{Name: "slow", Limit: tollgate.Limit{Rate: 10, Burst: 100},
			Policies: []tollgate.Policy{{Quota: daily(50, nil)}, {InFlight: 2}}}
		l := clockLimiter(t, store, clock, plan)
		a := mustTake(t, l, tollgate.Request{Tenant: key, Cost: 5}, true)
		b := mustTake(t, l, tollgate.Request{Tenant: key}, true)
		d := mustTake(t, l, tollgate.Request{Tenant: key}, false)
		if r := d.Results(); d.PolicyKind() != "in-flight" || r[0].Remaining != 94 || r[1].Remaining != 44 || r[2].Remaining != 0 {
			t.Fatalf("a third request in flight: %+v (%s), want a denial by the cap that takes nothing", r, d.PolicyKind())
		}
		// A reset keeps the slots of requests that still run.
		if err := l.Reset(ctx(), key); err != nil {
			t.Fatal(err)
		}
		mustTake(t, l, tollgate.Request{Tenant: key}, false)
		if err := l.Release(ctx(), &a); err != nil {
			t.Fatal(err)
		}
		c := mustTake(t, l, tollgate.Request{Tenant: key}, true)
		// Slots nobody renews come free when their lease ends; an
		// in-process store's have no lease, and end with the process.
		clock.Advance(leaseTTL)
		if _, ok := store.(storekit.InProcess); ok {
			mustTake(t, l, tollgate.Request{Tenant: key}, false)
		} else if d := mustTake(t, l, tollgate.Request{Tenant: key}, true); d.Results()[2].Remaining != 1 {
			t.Fatalf("after the leases ended: %+v, want this request alone in flight", d.Results())
		} else if err := l.Release(ctx(), &d); err != nil {
			t.Fatal(err)
		}
		for _, d := range []*tollgate.Decision{&b, &c} {
			if err := l.Release(ctx(), d); err != nil {
				t.Fatal(err)
			}
		}
		if n := len(l.SlotsHeld()); n != 0 {
			t.Fatalf("the Limiter still holds slots: %v", l.SlotsHeld())
		}
	})

	t.Run("a waiter that gives up frees its slot", func(t *testing.T) {
		clock := NewClock()
		store := newStore(t, clock)
		key := tenant(t, store, "k")
		plan := tollgate.Plan{Name: "slow", Limit: tollgate.Limit{Rate: 10, Burst: 1}, Policies: []tollgate.Policy{{InFlight: 3}}}
		l := clockLimiter(t, store, clock, plan)
		first := mustTake(t, l, tollgate.Request{Tenant: key}, true)
		waiter := mustTake(t, l, tollgate.Request{Tenant: key, MaxDelay: time.Second}, true)
		if waiter.Delay != 100*ms {
			t.Fatalf("the waiter's delay: %v, want 100ms", waiter.Delay)
		}
		if err := l.Cancel(ctx(), &waiter); err != nil {
			t.Fatal(err)
		}
		d, err := l.Inspect(ctx(), key)
		if err != nil {
			t.Fatal(err)
		}
		if r := d.Results(); r[0].RetryAfter != 100*ms || r[1].Remaining != 2 {
			t.Fatalf("after the waiter gave up: %+v, want its token and its slot back", r)
		}
		if err := l.Release(ctx(), &first); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("twenty waiters give up in any order", func(t *testing.T) {
		for _, seed := range []uint64{1, 2} {
			clock := NewClock()
			store := newStore(t, clock)
			key := tenant(t, store, "k")
			plan := tollgate.Plan{Name: "ten", Limit: tollgate.Limit{Rate: 10, Burst: 1},
				Policies: []tollgate.Policy{{Quota: daily(100, nil)}}}
			l := clockLimiter(t, store, clock, plan)
			mustTake(t, l, tollgate.Request{Tenant: key}, true)
			var waiters []tollgate.Decision
			for i := range 20 {
				d := mustTake(t, l, tollgate.Request{Tenant: key, MaxDelay: 3 * time.Second}, true)
				if want := time.Duration(i+1) * 100 * ms; d.Delay != want {
					t.Fatalf("waiter %d reserved for %v, want %v", i, d.Delay, want)
				}
				waiters = append(waiters, d)
			}
			clock.Advance(50 * ms)
			rand.New(rand.NewPCG(seed, 9)).Shuffle(len(waiters), func(i, j int) { waiters[i], waiters[j] = waiters[j], waiters[i] })
			for i := range waiters {
				if err := l.Cancel(ctx(), &waiters[i]); err != nil {
					t.Fatal(err)
				}
			}
			d, err := l.Inspect(ctx(), key)
			if err != nil {
				t.Fatal(err)
			}
			if r := d.Results(); r[0].ResetAfter != 50*ms || r[1].Remaining != 99 {
				t.Fatalf("after 20 waiters gave up: %+v, want only the first request to count", r)
			}
		}
	})
}

// mustTake takes req through l and checks that it is allowed, or denied,
// without an error or a degraded decision.
func mustTake(t *testing.T, l *tollgate.Limiter, req tollgate.Request, allowed bool) tollgate.Decision {
	t.Helper()
	d, err := l.Take(ctx(), req)
	if err != nil {
		t.Fatal(err)
	}
	if d.Degraded {
		t.Fatalf("degraded decision: %v", d.Err)
	}
	if d.Allowed != allowed {
		t.Fatalf("%+v: allowed %v, want %v (%+v)", req, d.Allowed, allowed, d.Results())
	}
	return d
}
