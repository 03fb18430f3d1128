package storetest

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/storekit"
)

// leaseTTL is the lease of the kit's in-flight Ops, the Limiter's.
const leaseTTL = 10 * time.Second

// inFlightRule returns the rule of a cap of burst requests in flight
// called name.
func inFlightRule(name string, burst int64) storekit.Rule {
	return storekit.Rule{Kind: storekit.InFlight, Name: name, Burst: burst}
}

const (
	release = storekit.Release
	renew   = storekit.Renew
)

// A flight is one tenant of a store driven beside Model, Op by Op.
type flight struct {
	t     *testing.T
	store tollgate.Store
	model Model
	clock *Clock
	key   string
	n     int
}

// newFlight returns a flight on a fresh store, on a tenant of its own.
func newFlight(t *testing.T, newStore NewStore) *flight {
	clock := NewClock()
	store := newStore(t, clock)
	return &flight{t: t, store: store, clock: clock, key: tenant(t, store, "k")}
}

// op applies an Op of kind on rules under lease, as the Limiter makes it,
// checks that the store agrees with Model, and returns both copies.
func (f *flight) op(kind storekit.Kind, lease string, rules ...storekit.Rule) twin {
	f.t.Helper()
	o := storekit.Op{Kind: kind, Tenant: f.key, Rules: rules, Cost: 1, Lease: lease, LeaseTTL: leaseTTL}
	f.n++
	return do(f.t, f.store, &f.model, f.clock, o, 0, f.n%2 == 0)
}

// take is op for a Take of cost, with MaxDelay delay.
func (f *flight) take(lease string, cost int64, delay time.Duration, rules ...storekit.Rule) twin {
	f.t.Helper()
	o := storekit.Op{Kind: take, Tenant: f.key, Rules: rules, Cost: cost, MaxDelay: delay, Lease: lease, LeaseTTL: leaseTTL}
	f.n++
	return do(f.t, f.store, &f.model, f.clock, o, 0, f.n%2 == 0)
}

// cancel gives back the grant g, a Take of cost on rules under lease.
func (f *flight) cancel(g twin) twin {
	f.t.Helper()
	o := storekit.Op{Kind: cancel, Tenant: f.key, Rules: g.got.Rules, Cost: g.got.Cost, Mark: g.got.Mark, Lease: g.got.Lease}
	f.n++
	return do(f.t, f.store, &f.model, f.clock, o, g.want.Mark, f.n%2 == 0)
}

// want checks an Op's decision (only a Take or an Inspect is ever
// allowed) and what each of its rules has left.
func want(t *testing.T, what string, tw twin, allowed bool, remaining ...int64) {
	t.Helper()
	got := tw.got
	if got.Allowed != allowed {
		t.Fatalf("%s: allowed %v, want %v (%+v)", what, got.Allowed, allowed, got.Results)
	}
	for i, n := range remaining {
		if got.Results[i].Remaining != n {
			t.Fatalf("%s: rule %d (%q) has %d left, want %d (%+v)", what, i, got.Rules[i].Name, got.Results[i].Remaining, n, got.Results)
		}
	}
}

// runInFlight checks caps on requests in flight (storekit.InFlight) Op by
// Op against Model: slots up to the cap whatever a request's cost, a
// request denied a slot taking from no other rule, Release, Renew, leases
// that expire, a Cancel that releases, a Reset that keeps the leases of
// running requests, two caps in one Op, hostile leases and rule names,
// and a long random run.
func runInFlight(t *testing.T, newStore NewStore) {
	t.Run("slots up to the cap", func(t *testing.T) {
		f := newFlight(t, newStore)
		cap3 := inFlightRule("inflight", 3)
		rules := []storekit.Rule{bucket10x5, daily8, cap3}
		want(t, "first", f.take("a", 1, 0, rules...), true, 4, 7, 2)
		want(t, "second", f.take("b", 1, 0, rules...), true, 3, 6, 1)
		want(t, "third", f.take("c", 1, 0, rules...), true, 2, 5, 0)
		denied := f.take("d", 1, 0, rules...)
		want(t, "a fourth in flight", denied, false, 2, 5, 0)
		if r := denied.got.Results; !r[0].Allowed || !r[1].Allowed || r[2].Allowed || r[2].RetryAfter != 0 {
			t.Fatalf("a fourth in flight: %+v, want the cap alone to deny it, with no RetryAfter", r)
		}
		want(t, "after the denial", f.op(inspect, "", rules...), false, 2, 5, 0)
		// A slot is one request, whatever it costs.
		want(t, "release", f.op(release, "a", cap3), false, 1)
		want(t, "a request of cost 2", f.take("e", 2, 0, rules...), true, 0, 3, 0)
		for _, l := range []string{"b", "c", "e"} {
			f.op(release, l, cap3)
		}
		want(t, "all released", f.op(inspect, "", cap3), true, 3)
	})

	t.Run("release", func(t *testing.T) {
		f := newFlight(t, newStore)
		cap2 := inFlightRule("inflight", 2)
		rules := []storekit.Rule{main100, cap2}
		f.take("a", 1, 0, rules...)
		f.take("b", 1, 0, rules...)
		want(t, "full", f.take("c", 1, 0, rules...), false, 98, 0)
		want(t, "release b", f.op(release, "b", cap2), false, 1)
		want(t, "release b again", f.op(release, "b", cap2), false, 1)
		want(t, "release a lease never taken", f.op(release, "zz", cap2), false, 1)
		want(t, "release under all the rules", f.op(release, "a", rules...), false, 98, 2)
		want(t, "take again", f.take("c", 1, 0, rules...), true, 97, 1)
		f.op(release, "c", cap2)
	})

	t.Run("renew and expiry", func(t *testing.T) {
		f := newFlight(t, newStore)
		cap2 := inFlightRule("inflight", 2)
		f.op(take, "a", cap2) // expires at 10s
		f.clock.Advance(4 * time.Second)
		f.op(take, "b", cap2) // expires at 14s
		f.clock.Advance(5 * time.Second)
		want(t, "renew a at 9s", f.op(renew, "a", cap2), false, 0) // now expires at 19s
		f.clock.Advance(time.Second)
		want(t, "at 10s, a renewed", f.op(inspect, "", cap2), false, 0)
		f.clock.Advance(4*time.Second - time.Microsecond)
		want(t, "a microsecond before b expires", f.op(inspect, "", cap2), false, 0)
		f.clock.Advance(time.Microsecond)
		want(t, "as b expires", f.op(inspect, "", cap2), true, 1)
		want(t, "renew b, expired", f.op(renew, "b", cap2), false, 1)
		want(t, "after renewing b", f.op(inspect, "", cap2), true, 1)
		want(t, "renew a lease never taken", f.op(renew, "zz", cap2), false, 1)
		want(t, "take c", f.op(take, "c", cap2), true, 0) // expires at 24s
		f.clock.Advance(5 * time.Second)
		want(t, "at 19s, a expired", f.op(inspect, "", cap2), true, 1)
		want(t, "release a, expired", f.op(release, "a", cap2), false, 1)
		f.clock.Advance(5 * time.Second)
		want(t, "at 24s, every lease expired", f.op(take, "d", cap2), true, 1)
		f.op(release, "d", cap2)
	})

	t.Run("cancel releases", func(t *testing.T) {
		f := newFlight(t, newStore)
		cap2 := inFlightRule("inflight", 2)
		rules := []storekit.Rule{bucket10x1, cap2}
		first := f.take("a", 1, time.Second, rules...)
		waiter := f.take("b", 1, time.Second, rules...)
		if waiter.got.Delay != 100*ms {
			t.Fatalf("the waiter's delay: %v, want 100ms", waiter.got.Delay)
		}
		want(t, "two in flight", f.take("c", 1, time.Second, rules...), false, 0, 0)
		// The waiter gives up before its time: its token and its slot
		// come back.
		want(t, "the waiter cancels", f.cancel(waiter), false, 0, 1)
		if r := f.op(inspect, "", rules...).got.Results; r[0].RetryAfter != 100*ms {
			t.Fatalf("after the cancel: %+v, want the bucket's next token 100ms out", r)
		}
		// The first request's time has come: its cancel gives back no
		// token, but its slot.
		f.clock.Advance(50 * ms)
		want(t, "the first cancels", f.cancel(first), false, 0, 2)
		if r := f.op(inspect, "", rules...).got.Results; r[0].RetryAfter != 50*ms {
			t.Fatalf("after the second cancel: %+v, want the bucket's next token 50ms out", r)
		}
	})

	t.Run("reset keeps leases", func(t *testing.T) {
		f := newFlight(t, newStore)
		cap2 := inFlightRule("inflight", 2)
		rules := []storekit.Rule{bucket10x5, daily8, cap2}
		f.take("a", 2, 0, rules...)
		f.take("b", 2, 0, rules...)
		want(t, "reset", f.op(reset, "", rules...), false, 5, 8, 0)
		want(t, "after the reset", f.take("c", 1, 0, rules...), false, 5, 8, 0)
		want(t, "reset of the main bucket alone", f.op(reset, "", bucket10x5), false, 5)
		want(t, "after it", f.op(inspect, "", rules...), false, 5, 8, 0)
		f.op(release, "a", cap2)
		want(t, "after a release", f.take("c", 1, 0, rules...), true, 4, 7, 0)
		for _, l := range []string{"b", "c"} {
			f.op(release, l, cap2)
		}
		want(t, "all released", f.op(inspect, "", rules...), true, 4, 7, 2)
	})

	t.Run("two caps", func(t *testing.T) {
		f := newFlight(t, newStore)
		plan, budget := inFlightRule("inflight", 3), inFlightRule("b:x:inflight", 1)
		all := []storekit.Rule{main100, plan, budget}
		want(t, "the budget's one", f.take("a", 1, 0, all...), true, 99, 2, 0)
		want(t, "the budget's second", f.take("b", 1, 0, all...), false, 99, 2, 0)
		want(t, "outside the budget", f.take("c", 1, 0, main100, plan), true, 98, 1)
		want(t, "release a", f.op(release, "a", plan, budget), false, 2, 1)
		want(t, "the budget again", f.take("b", 1, 0, all...), true, 97, 1, 0)
		f.op(release, "b", plan, budget)
		f.op(release, "c", plan)
	})

	t.Run("a cap and a bucket of one name", func(t *testing.T) {
		f := newFlight(t, newStore)
		b, c := bucketRule("x", 10, 3), inFlightRule("x", 1)
		want(t, "first", f.take("a", 1, 0, b, c), true, 2, 0)
		want(t, "second", f.take("b", 1, 0, b, c), false, 2, 0)
		want(t, "the bucket alone", f.op(take, "", b), true, 1)
		f.op(release, "a", c)
		want(t, "after a release", f.take("b", 1, 0, b, c), true, 0, 0)
		// A reset forgets the bucket, and keeps the lease of its name.
		want(t, "reset", f.op(reset, "", b, c), false, 3, 0)
		want(t, "after the reset", f.take("c", 1, 0, b, c), false, 3, 0)
		f.op(release, "b", c)
	})

	t.Run("hostile leases and names", func(t *testing.T) { runHostileLeases(t, newStore) })
	t.Run("random", func(t *testing.T) { runInFlightModel(t, newStore) })
}

// runHostileLeases checks that leases of any bytes, in caps of any name,
// of tenants of any ID, stay apart: no lease reaches another's slot.
func runHostileLeases(t *testing.T, newStore NewStore) {
	long := strings.Repeat("l", 1<<16)
	leases := []string{"", "\x00", "a", "a\x00", "a\x00b", "ab", "{", "}", "{a}", ":", "a:b", "*", "?", "%s",
		"inflight", "~expires", "-inf", "+inf", "1", "1e3", "\xff\xfe", "日本語", strings.Repeat("l", 64), long, long + "m"}
	f := newFlight(t, newStore)
	c := inFlightRule("inflight", int64(len(leases)))
	for i, l := range leases {
		if tw := f.op(take, l, c); !tw.got.Allowed || tw.got.Results[0].Remaining != int64(len(leases)-i-1) {
			t.Fatalf("lease %d (%d bytes) shares a slot with an earlier one: %+v", i, len(l), tw.got.Results)
		}
	}
	for i, l := range leases {
		if tw := f.op(release, l, c); tw.got.Results[0].Remaining != int64(i+1) {
			t.Fatalf("releasing lease %d (%d bytes) released %d slots", i, len(l), tw.got.Results[0].Remaining-int64(i))
		}
	}

	// Caps of every name, on tenants of every ID: each starts empty.
	names := []string{"inflight", "", ":", "{x}", "b:reports", "b:x:inflight", "\x00", "day", strings.Repeat("n", 300)}
	keys := []string{"", "\x00", "{", "}", "{tenant}", "tenant", "tenant:f:inflight", "tenant}:f:x", "\xff",
		strings.Repeat("k", 64), strings.Repeat("k", 65), strings.Repeat("k", 300)}
	prefix := Key(t, "")
	for i, k := range keys {
		f.key = prefix + k
		forget(t, f.store, f.key)
		var rules []storekit.Rule
		for _, name := range names {
			rules = append(rules, inFlightRule(name, 1))
		}
		rules = append(rules, bucketRule("inflight", 1, 1), quotaRule("b:x:inflight", daily(1, nil)))
		if tw := f.op(take, "lease", rules...); !tw.got.Allowed {
			t.Fatalf("key %d (%q) shares a cap with an earlier key or rule: %+v", i, k, tw.got.Results)
		}
		for _, r := range rules {
			if tw := f.op(inspect, "", r); tw.got.Results[0].Remaining != 0 {
				t.Fatalf("key %d (%q), rule %q: %+v after one request: rules share a state", i, k, r.Name, tw.got.Results)
			}
		}
		f.op(release, "lease", rules...)
	}
}

// runInFlightModel drives a store and Model side by side through a long
// pseudo-random sequence of Ops on caps in flight beside buckets and
// quotas: takes under fresh leases, releases, renewals and cancels of
// leases old and new, resets, plans that change, and clock steps around
// the lease's life.
func runInFlightModel(t *testing.T, newStore NewStore) {
	f := newFlight(t, newStore)
	rng := rand.New(rand.NewPCG(7, 8))
	plan, budget := inFlightRule("inflight", 3), inFlightRule("b:x:inflight", 1)
	ruleSets := [][]storekit.Rule{
		{bucket10x5, plan},
		{bucket10x5, daily8, plan, budget},
		{bucketRule("", 100, 20), inFlightRule("inflight", 5)},
		{inFlightRule("inflight", 1)},
		{bucket10x2, daily8},
	}
	var leases []string // every lease taken, newest last
	var grants []twin   // granted Takes, for cancels
	var ttl = leaseTTL  // the leases of the next Ops
	rules := ruleSets[0]
	capped := 0 // Takes a cap denied
	for i := range 1500 {
		switch d := rng.IntN(100); {
		case d < 3:
			rules = ruleSets[rng.IntN(len(ruleSets))]
		case d < 6:
			ttl = []time.Duration{leaseTTL, time.Second, 300 * ms}[rng.IntN(3)]
		case d < 15:
			f.clock.Advance(time.Duration(rng.Int64N(int64(4 * time.Second))))
		case d < 17:
			f.clock.Advance(leaseTTL - time.Duration(rng.Int64N(2))*time.Microsecond)
		default:
			f.clock.Advance(time.Duration(rng.Int64N(int64(100 * ms))))
		}
		op := storekit.Op{Tenant: f.key, Rules: rules, Cost: 1 + rng.Int64N(2), LeaseTTL: ttl}
		old := func() string {
			if len(leases) == 0 || rng.IntN(20) == 0 {
				return "never"
			}
			return leases[len(leases)-1-rng.IntN(min(len(leases), 8))]
		}
		var modelMark int64
		switch d := rng.IntN(100); {
		case d < 40:
			op.Kind, op.Lease = take, fmt.Sprint("lease-", i)
			if rng.IntN(3) == 0 {
				op.MaxDelay = time.Duration(rng.Int64N(int64(time.Second)))
			}
		case d < 60:
			op.Kind, op.Lease = release, old()
			if rng.IntN(2) == 0 {
				op.Rules = inFlightOnly(rules)
			}
		case d < 72:
			op.Kind, op.Lease = renew, old()
			op.Rules = inFlightOnly(rules)
		case d < 82:
			op.Kind = inspect
		case d < 84:
			op.Kind = reset
		default:
			if len(grants) == 0 {
				op.Kind = inspect
				break
			}
			k := rng.IntN(len(grants))
			g := grants[k]
			grants = append(grants[:k], grants[k+1:]...)
			op.Kind, op.Rules, op.Cost, op.Lease = cancel, g.got.Rules, g.got.Cost, g.got.Lease
			op.Mark, modelMark = g.got.Mark, g.want.Mark
		}
		for _, r := range op.Rules {
			if r.Kind != storekit.InFlight && op.Cost > r.Burst {
				op.Cost = 1
			}
		}
		tw := do(t, f.store, &f.model, f.clock, op, modelMark, i%3 != 0)
		for j, r := range tw.want.Results {
			if op.Kind == take && !r.Allowed && op.Rules[j].Kind == storekit.InFlight {
				capped++
				break
			}
		}
		if op.Kind == take && tw.got.Allowed {
			leases = append(leases, op.Lease)
			grants = append(grants, tw)
			if len(grants) > 20 {
				grants = grants[1:]
			}
		}
	}
	if capped < 100 {
		t.Fatalf("only %d Takes met a full cap: the run tests too little", capped)
	}
	for _, l := range leases {
		f.op(release, l, plan, budget, inFlightRule("inflight", 1))
	}
}

// inFlightOnly returns the in-flight caps of rules, as the Limiter
// releases and renews them.
func inFlightOnly(rules []storekit.Rule) []storekit.Rule {
	var out []storekit.Rule
	for _, r := range rules {
		if r.Kind == storekit.InFlight {
			out = append(out, r)
		}
	}
	return out
}
