package storetest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/storekit"
)

// bucketRule returns the rule of a token bucket called name.
func bucketRule(name string, rate float64, burst int64) storekit.Rule {
	r := storekit.BucketRule(rate, burst)
	r.Name = name
	return r
}

// quotaRule returns the rule of quota q called name, as a Limiter makes it.
func quotaRule(name string, q tollgate.Quota) storekit.Rule {
	return storekit.Rule{Kind: storekit.Quota, Name: name, Burst: q.Tokens, Period: q.Bounds}
}

func daily(tokens int64, loc *time.Location) tollgate.Quota {
	return tollgate.Quota{Tokens: tokens, Period: tollgate.Daily, Location: loc}
}

var (
	bucket10x5  = bucketRule("", 10, 5)
	bucket10x2  = bucketRule("", 10, 2)
	bucket10x1  = bucketRule("", 10, 1)
	main100     = bucketRule("", 100, 100)
	reportsHour = bucketRule("b:reports", 50.0/3600, 50)
	daily8      = quotaRule("day", daily(8, nil))
)

const (
	take    = storekit.Take
	inspect = storekit.Inspect
	reset   = storekit.Reset
	cancel  = storekit.Cancel
)

type opStep struct {
	advance time.Duration
	set     string // an RFC 3339 time to move the clock to, if not ""
	kind    storekit.Kind
	rules   []storekit.Rule // nil: the case's
	cost    int64           // 0: 1
	delay   time.Duration   // MaxDelay
	markOf  int             // a Cancel: the step (1-based) whose Mark it gives back
	repeat  int

	allowed   bool
	wantDelay time.Duration
	remaining []int64         // per rule, if not nil
	retry     []time.Duration // per rule, if not nil
	reset     []time.Duration // ResetAfter per rule, if not nil
}

type opsCase struct {
	name  string
	start string // RFC 3339; "" is the Clock's default
	rules []storekit.Rule
	steps []opStep
}

func opsCases(t *testing.T) []opsCase {
	paris := mustLocation(t, "Europe/Paris")
	tokyo := mustLocation(t, "Asia/Tokyo")
	return []opsCase{
		{
			name:  "bucket and daily quota",
			start: "2026-03-10T12:00:00Z",
			rules: []storekit.Rule{bucket10x5, daily8},
			steps: []opStep{
				{kind: take, allowed: true, remaining: []int64{4, 7}},
				{kind: take, allowed: true, remaining: []int64{3, 6}},
				{kind: take, allowed: true, remaining: []int64{2, 5}},
				{kind: take, allowed: true, remaining: []int64{1, 4}},
				{kind: take, allowed: true, remaining: []int64{0, 3}},
				// The bucket denies; the quota spends nothing.
				{kind: take, repeat: 3, remaining: []int64{0, 3}, retry: []time.Duration{100 * ms, 0}},
				{advance: time.Second, kind: take, allowed: true, remaining: []int64{4, 2}},
				{kind: take, allowed: true, remaining: []int64{3, 1}},
				{kind: take, allowed: true, remaining: []int64{2, 0}},
				// The quota denies until midnight; the bucket spends nothing.
				{kind: take, repeat: 3, remaining: []int64{2, 0}, retry: []time.Duration{0, 12*time.Hour - time.Second}},
				{kind: inspect, remaining: []int64{2, 0}, retry: []time.Duration{0, 12*time.Hour - time.Second}},
				{set: "2026-03-11T00:00:00Z", kind: take, allowed: true, remaining: []int64{4, 7}},
			},
		},
		{
			name:  "bucket and a route's budget",
			rules: []storekit.Rule{main100, reportsHour},
			steps: []opStep{
				{kind: take, cost: 10, allowed: true, remaining: []int64{90, 40}},
				{kind: take, cost: 10, allowed: true, remaining: []int64{80, 30}},
				{kind: take, cost: 10, allowed: true, remaining: []int64{70, 20}},
				{kind: take, cost: 10, allowed: true, remaining: []int64{60, 10}},
				{kind: take, cost: 10, allowed: true, remaining: []int64{50, 0}},
				// 10 tokens of the budget come back in 720s.
				{kind: take, cost: 10, remaining: []int64{50, 0}, retry: []time.Duration{0, 720 * time.Second}},
				// The main bucket alone: the denied request spent none of it.
				{kind: take, rules: []storekit.Rule{main100}, allowed: true, remaining: []int64{49}},
			},
		},
		{
			name:  "daily quota at the edge of a period",
			start: "2026-01-01T23:59:59.999998Z",
			rules: []storekit.Rule{quotaRule("day", daily(3, nil))},
			steps: []opStep{
				{kind: take, allowed: true, remaining: []int64{2}},
				{advance: time.Microsecond, kind: take, allowed: true, remaining: []int64{1}},
				{kind: take, allowed: true, remaining: []int64{0}},
				{kind: take, retry: []time.Duration{time.Microsecond}, remaining: []int64{0}},
				// The first microsecond of the next day is a new period.
				{advance: time.Microsecond, kind: take, allowed: true, remaining: []int64{2}},
			},
		},
		{
			name:  "monthly quota with an anchor day",
			start: "2026-01-14T23:59:59.999999Z",
			rules: []storekit.Rule{quotaRule("month", tollgate.Quota{Tokens: 2, Period: tollgate.Monthly, AnchorDay: 15})},
			steps: []opStep{
				{kind: take, allowed: true, remaining: []int64{1}},
				{kind: take, allowed: true, remaining: []int64{0}},
				{kind: take, retry: []time.Duration{time.Microsecond}, remaining: []int64{0}},
				{advance: time.Microsecond, kind: take, allowed: true, remaining: []int64{1}},
				{set: "2026-02-14T23:59:59.999999Z", kind: take, allowed: true, remaining: []int64{0}},
				{advance: time.Microsecond, kind: take, allowed: true, remaining: []int64{1}},
			},
		},
		{
			name:  "daily quota in a time zone",
			start: "2026-01-01T22:59:59.999999Z", // 23:59:59.999999 in Paris
			rules: []storekit.Rule{quotaRule("day", daily(1, paris))},
			steps: []opStep{
				{kind: take, allowed: true, remaining: []int64{0}},
				{kind: take, retry: []time.Duration{time.Microsecond}, remaining: []int64{0}},
				{advance: time.Microsecond, kind: take, allowed: true, remaining: []int64{0}},
				{kind: take, retry: []time.Duration{24 * time.Hour}, remaining: []int64{0}},
			},
		},
		{
			name:  "plan change in the middle of a period keeps the usage",
			start: "2026-05-05T08:00:00Z",
			rules: []storekit.Rule{bucket10x5, quotaRule("day", daily(10, nil))},
			steps: []opStep{
				{kind: take, cost: 3, allowed: true, remaining: []int64{2, 7}},
				{kind: take, cost: 3, allowed: true, remaining: []int64{2, 4}, advance: 500 * ms},
				// Upgraded: a bigger bucket and a bigger quota, the same usage.
				{kind: take, cost: 3, allowed: true, remaining: []int64{11, 11},
					rules: []storekit.Rule{bucketRule("", 20, 20), quotaRule("day", daily(20, nil))}},
				// Downgraded below the usage: nothing left today.
				{advance: time.Second, kind: take, remaining: []int64{5, 0}, retry: []time.Duration{0, 16*time.Hour - 1500*ms},
					rules: []storekit.Rule{bucket10x5, quotaRule("day", daily(5, nil))}},
			},
		},
		{
			// A tenant moved to a plan whose day starts in Tokyo keeps
			// what it used of its UTC day, and its next request counts
			// in Tokyo's day.
			name:  "plan change to a quota in another time zone carries the usage over",
			start: "2026-03-10T20:00:00Z", // 05:00 on the 11th in Tokyo
			rules: []storekit.Rule{quotaRule("day", daily(10, nil))},
			steps: []opStep{
				{kind: take, cost: 6, allowed: true, remaining: []int64{4}, reset: []time.Duration{4 * time.Hour}},
				{kind: inspect, rules: []storekit.Rule{quotaRule("day", daily(10, tokyo))}, allowed: true, remaining: []int64{4}},
				// Tokyo's day ends at 15:00 UTC on the 11th.
				{kind: take, rules: []storekit.Rule{quotaRule("day", daily(10, tokyo))}, allowed: true,
					remaining: []int64{3}, reset: []time.Duration{19 * time.Hour}},
				// The UTC day has ended; Tokyo's has not.
				{set: "2026-03-11T00:00:00Z", kind: take, cost: 3, rules: []storekit.Rule{quotaRule("day", daily(10, tokyo))},
					allowed: true, remaining: []int64{0}},
				{kind: take, rules: []storekit.Rule{quotaRule("day", daily(10, tokyo))}, remaining: []int64{0},
					retry: []time.Duration{15 * time.Hour}},
				{set: "2026-03-11T15:00:00Z", kind: take, rules: []storekit.Rule{quotaRule("day", daily(10, tokyo))},
					allowed: true, remaining: []int64{9}},
				// And back to UTC, whose day ends in 9 hours.
				{kind: take, allowed: true, remaining: []int64{8}, reset: []time.Duration{9 * time.Hour}},
			},
		},
		{
			name:  "reservations within MaxDelay",
			rules: []storekit.Rule{bucket10x2},
			steps: []opStep{
				{kind: take, delay: 250 * ms, allowed: true, remaining: []int64{1}},
				{kind: take, delay: 250 * ms, allowed: true, remaining: []int64{0}},
				{kind: take, delay: 250 * ms, allowed: true, wantDelay: 100 * ms, remaining: []int64{0}, reset: []time.Duration{300 * ms}},
				{kind: take, delay: 250 * ms, allowed: true, wantDelay: 200 * ms, remaining: []int64{0}, reset: []time.Duration{400 * ms}},
				// 300ms is beyond MaxDelay: denied, nothing reserved.
				{kind: take, delay: 250 * ms, retry: []time.Duration{300 * ms}, remaining: []int64{0}},
				// An Inspect reserves nothing and ignores MaxDelay.
				{kind: inspect, delay: 300 * ms, retry: []time.Duration{300 * ms}, remaining: []int64{0}},
				{advance: 100 * ms, kind: take, delay: 250 * ms, allowed: true, wantDelay: 200 * ms},
			},
		},
		{
			name:  "a delay of exactly MaxDelay is granted",
			rules: []storekit.Rule{bucket10x1},
			steps: []opStep{
				{kind: take, allowed: true, remaining: []int64{0}},
				{kind: take, delay: 100 * ms, allowed: true, wantDelay: 100 * ms, remaining: []int64{0}},
				{kind: take, delay: 200*ms - time.Microsecond, retry: []time.Duration{200 * ms}, remaining: []int64{0}},
				{kind: take, delay: 200 * ms, allowed: true, wantDelay: 200 * ms, remaining: []int64{0}},
			},
		},
		{
			name:  "a reservation of several tokens",
			rules: []storekit.Rule{bucket10x2},
			steps: []opStep{
				{kind: take, cost: 2, delay: 250 * ms, allowed: true, remaining: []int64{0}},
				{kind: take, cost: 2, delay: 250 * ms, allowed: true, wantDelay: 200 * ms, remaining: []int64{0}},
				{kind: take, delay: 250 * ms, retry: []time.Duration{300 * ms}, remaining: []int64{0}},
				{advance: 50 * ms, kind: take, delay: 250 * ms, allowed: true, wantDelay: 250 * ms, remaining: []int64{0}},
			},
		},
		{
			name:  "a reservation waits for its slowest bucket",
			rules: []storekit.Rule{bucket10x1, bucketRule("b:x", 5, 1)},
			steps: []opStep{
				/* 1 */ {kind: take, delay: time.Second, allowed: true, remaining: []int64{0, 0}},
				/* 2 */ {kind: take, delay: time.Second, allowed: true, wantDelay: 200 * ms, remaining: []int64{0, 0}},
				// The budget's bucket is 400ms out, past MaxDelay: neither
				// bucket reserves.
				/* 3 */ {kind: take, delay: 300 * ms, retry: []time.Duration{200 * ms, 400 * ms}, remaining: []int64{0, 0}},
				/* 4 */ {kind: inspect, rules: []storekit.Rule{bucket10x1}, retry: []time.Duration{200 * ms}},
				// The reservation gives both buckets their tokens back.
				/* 5 */ {kind: cancel, markOf: 2, remaining: []int64{0, 0}, reset: []time.Duration{100 * ms, 200 * ms}},
				/* 6 */ {kind: inspect, retry: []time.Duration{100 * ms, 200 * ms}, remaining: []int64{0, 0}},
				/* 7 */ {advance: 100 * ms, kind: take, delay: 150 * ms, allowed: true, wantDelay: 100 * ms, remaining: []int64{0, 0}},
			},
		},
		{
			name:  "a quota never reserves",
			rules: []storekit.Rule{bucket10x2, quotaRule("day", daily(3, nil))},
			steps: []opStep{
				{kind: take, delay: time.Second, allowed: true, remaining: []int64{1, 2}},
				{kind: take, delay: time.Second, allowed: true, remaining: []int64{0, 1}},
				{kind: take, delay: time.Second, allowed: true, wantDelay: 100 * ms, remaining: []int64{0, 0}},
				{kind: take, delay: time.Second, remaining: []int64{0, 0}},
			},
		},
		{
			name:  "cancels, in any order",
			rules: []storekit.Rule{bucket10x1, quotaRule("day", daily(100, nil))},
			steps: []opStep{
				/* 1 */ {kind: take, delay: time.Second, allowed: true, remaining: []int64{0, 99}},
				/* 2 */ {kind: take, delay: time.Second, allowed: true, wantDelay: 100 * ms, remaining: []int64{0, 98}},
				/* 3 */ {kind: take, delay: time.Second, allowed: true, wantDelay: 200 * ms, remaining: []int64{0, 97}},
				// An earlier reservation than the latest gives back as
				// much: the later ones move up.
				/* 4 */ {kind: cancel, markOf: 2, remaining: []int64{0, 98}, reset: []time.Duration{200 * ms, 24 * time.Hour}},
				/* 5 */ {kind: inspect, retry: []time.Duration{200 * ms, 0}, remaining: []int64{0, 98}},
				/* 6 */ {kind: cancel, markOf: 3, remaining: []int64{0, 99}, reset: []time.Duration{100 * ms, 24 * time.Hour}},
				/* 7 */ {kind: inspect, retry: []time.Duration{100 * ms, 0}, remaining: []int64{0, 99}},
				// Step 1 was no reservation: its time has come.
				/* 8 */ {kind: cancel, markOf: 1, remaining: []int64{0, 99}, reset: []time.Duration{100 * ms, 24 * time.Hour}},
				/* 9 */ {advance: 150 * ms, kind: take, delay: time.Second, allowed: true, remaining: []int64{0, 98}},
				/* 10 */ {kind: take, delay: time.Second, allowed: true, wantDelay: 100 * ms, remaining: []int64{0, 97}},
				// Once the reserved time has come, a cancel gives nothing back.
				/* 11 */ {advance: 200 * ms, kind: cancel, markOf: 10, remaining: []int64{1, 97}},
				/* 12 */ {kind: inspect, allowed: true, remaining: []int64{1, 97}},
			},
		},
		{
			name:  "inspect takes nothing",
			rules: []storekit.Rule{bucket10x5, daily8},
			steps: []opStep{
				{kind: inspect, repeat: 20, allowed: true, remaining: []int64{5, 8}},
				{kind: take, allowed: true, remaining: []int64{4, 7}},
				{kind: inspect, cost: 5, retry: []time.Duration{100 * ms, 0}, remaining: []int64{4, 7}},
				{kind: take, cost: 4, allowed: true, remaining: []int64{0, 3}},
				{kind: inspect, repeat: 5, retry: []time.Duration{100 * ms, 0}, remaining: []int64{0, 3}},
			},
		},
		{
			name:  "reset",
			rules: []storekit.Rule{bucket10x5, daily8, reportsHour},
			steps: []opStep{
				{kind: take, cost: 5, allowed: true, remaining: []int64{0, 3, 45}},
				{kind: take, remaining: []int64{0, 3, 45}, retry: []time.Duration{100 * ms, 0, 0}},
				{kind: reset, remaining: []int64{5, 8, 50}, reset: []time.Duration{0, 0, 0}},
				{kind: take, cost: 5, allowed: true, remaining: []int64{0, 3, 45}},
			},
		},
		{
			// A tenant whose plan no longer has the budget and the
			// quota is reset under the new plan: all of them are
			// forgotten, so that they are full if it comes back.
			name:  "reset clears the rules the Op does not name",
			rules: []storekit.Rule{bucket10x5, daily8, reportsHour},
			steps: []opStep{
				{kind: take, cost: 5, allowed: true, remaining: []int64{0, 3, 45}},
				{kind: reset, rules: []storekit.Rule{bucket10x5}, remaining: []int64{5}},
				{kind: inspect, remaining: []int64{5, 8, 50}, allowed: true},
				{kind: take, cost: 5, allowed: true, remaining: []int64{0, 3, 45}},
				{kind: reset, rules: []storekit.Rule{}},
				{kind: take, cost: 5, allowed: true, remaining: []int64{0, 3, 45}},
			},
		},
	}
}

func mustLocation(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("no time zone database (import time/tzdata): %v", err)
	}
	return loc
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// A twin is an Op applied to a store and to Model: the store's copy and
// the model's, which differ only in their Marks.
type twin struct{ got, want *storekit.Op }

// do applies op to store and to model at the clock's time, and checks
// that their answers agree. With now set, the store's Op carries the
// clock's time in Now, as a Limiter's does; otherwise Now is zero and the
// store reads its own clock.
func do(t testing.TB, store tollgate.Store, model *Model, clock *Clock, op storekit.Op, modelMark int64, now bool) twin {
	t.Helper()
	got, want := op, op
	got.Rules, want.Rules = append([]storekit.Rule(nil), op.Rules...), append([]storekit.Rule(nil), op.Rules...)
	got.Results, want.Results = nil, nil
	want.Mark = modelMark
	at := clock.Now()
	if now {
		got.Now = at
	}
	model.Do(&want, at)
	if err := store.Do(ctx(), &got); err != nil {
		t.Fatalf("%v of %d rules, cost %d, at %s: %v", op.Kind, len(op.Rules), op.Cost, at.UTC().Format(time.RFC3339Nano), err)
	}
	where := fmt.Sprintf("%v of %d rules, cost %d, max delay %v, lease %.20q, at %s", kindName(op.Kind), len(op.Rules), op.Cost, op.MaxDelay,
		op.Lease, at.UTC().Format(time.RFC3339Nano))
	if got.Allowed != want.Allowed || got.Delay != want.Delay {
		t.Fatalf("%s: allowed %v after %v; the model says %v after %v", where, got.Allowed, got.Delay, want.Allowed, want.Delay)
	}
	if fmt.Sprint(got.Results) != fmt.Sprint(want.Results) {
		t.Fatalf("%s: results %+v; the model says %+v", where, got.Results, want.Results)
	}
	return twin{&got, &want}
}

func kindName(k storekit.Kind) string {
	switch k {
	case take:
		return "Take"
	case inspect:
		return "Inspect"
	case reset:
		return "Reset"
	case cancel:
		return "Cancel"
	case storekit.Check:
		return "Check"
	case release:
		return "Release"
	case renew:
		return "Renew"
	}
	return fmt.Sprintf("Kind(%d)", k)
}

// runOps checks the table of Ops, each step against its stated figures
// and against Model.
func runOps(t *testing.T, newStore NewStore) {
	for _, tc := range opsCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			clock := NewClock()
			if tc.start != "" {
				clock = NewClockAt(mustTime(t, tc.start))
			}
			store := newStore(t, clock)
			var model Model
			key := tenant(t, store, "k")
			grants := map[int]twin{}
			for i, s := range tc.steps {
				clock.Advance(s.advance)
				if s.set != "" {
					clock.Set(mustTime(t, s.set))
				}
				rules := s.rules
				if rules == nil {
					rules = tc.rules
				}
				for n := range max(s.repeat, 1) {
					op := storekit.Op{Kind: s.kind, Tenant: key, Rules: rules, Cost: max(s.cost, 1), MaxDelay: s.delay}
					var modelMark int64
					if s.markOf > 0 {
						g := grants[s.markOf]
						op.Mark, modelMark = g.got.Mark, g.want.Mark
					}
					tw := do(t, store, &model, clock, op, modelMark, (i+n)%2 == 0)
					got := tw.got
					where := fmt.Sprintf("step %d (%v #%d at %s)", i+1, kindName(s.kind), n, clock.Now().UTC().Format(time.RFC3339Nano))
					if got.Allowed != s.allowed || got.Delay != s.wantDelay {
						t.Fatalf("%s: allowed %v after %v, want %v after %v", where, got.Allowed, got.Delay, s.allowed, s.wantDelay)
					}
					for r := range s.remaining {
						if got.Results[r].Remaining != s.remaining[r] {
							t.Fatalf("%s: rule %d has %d left, want %d (%+v)", where, r, got.Results[r].Remaining, s.remaining[r], got.Results)
						}
					}
					for r := range s.retry {
						if got.Results[r].RetryAfter != s.retry[r] {
							t.Fatalf("%s: rule %d RetryAfter %v, want %v", where, r, got.Results[r].RetryAfter, s.retry[r])
						}
					}
					for r := range s.reset {
						if got.Results[r].ResetAfter != s.reset[r] {
							t.Fatalf("%s: rule %d ResetAfter %v, want %v", where, r, got.Results[r].ResetAfter, s.reset[r])
						}
					}
					if got.Allowed && got.Kind == take {
						grants[i+1] = tw
					}
				}
			}
		})
	}
	t.Run("twenty waiters give up in any order", func(t *testing.T) { runWaitersGiveUp(t, newStore) })
}

// runWaitersGiveUp has 20 requests reserve a token each on an empty
// bucket, then gives every reservation back, in a shuffled order: the
// tenant owes nothing for them, on the bucket or on the quota beside it.
func runWaitersGiveUp(t *testing.T, newStore NewStore) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("order ", seed), func(t *testing.T) {
			clock := NewClock()
			store := newStore(t, clock)
			var model Model
			key := tenant(t, store, "k")
			rules := []storekit.Rule{bucket10x1, quotaRule("day", daily(100, nil))}
			first := do(t, store, &model, clock, storekit.Op{Kind: take, Tenant: key, Rules: rules, Cost: 1}, 0, true)
			var waiters []twin
			for i := range 20 {
				w := do(t, store, &model, clock, storekit.Op{Kind: take, Tenant: key, Rules: rules, Cost: 1, MaxDelay: 3 * time.Second}, 0, i%2 == 0)
				if want := time.Duration(i+1) * 100 * ms; !w.got.Allowed || w.got.Delay != want {
					t.Fatalf("waiter %d: allowed %v after %v, want after %v", i, w.got.Allowed, w.got.Delay, want)
				}
				waiters = append(waiters, w)
			}
			clock.Advance(50 * ms) // the first waiter's slot is still 50ms away
			rng := rand.New(rand.NewPCG(seed, 7))
			rng.Shuffle(len(waiters), func(i, j int) { waiters[i], waiters[j] = waiters[j], waiters[i] })
			for i, w := range waiters {
				op := storekit.Op{Kind: cancel, Tenant: key, Rules: rules, Cost: 1, Mark: w.got.Mark}
				do(t, store, &model, clock, op, w.want.Mark, i%2 == 1)
			}
			in := do(t, store, &model, clock, storekit.Op{Kind: inspect, Tenant: key, Rules: rules, Cost: 1}, 0, true)
			// Only the first request counts: its token comes back 50ms
			// from now.
			if r := in.got.Results; r[0].ResetAfter != 50*ms || r[1].Remaining != 99 {
				t.Fatalf("after every waiter gave up: %+v, want the bucket full in 50ms and 99 left of the quota (the first request: %+v)",
					r, first.got.Results)
			}
		})
	}
}

// runModel drives a store and Model side by side through a long
// pseudo-random sequence of Ops of every kind: rule sets that change (plan
// changes, a day in another time zone), costs, reservations, cancels in
// any order, resets, inspects, and clock steps that cross days and
// months; every answer must be the same.
func runModel(t *testing.T, newStore NewStore) {
	clock := NewClockAt(mustTime(t, "2026-01-31T22:00:00Z"))
	store := newStore(t, clock)
	var model Model
	key := tenant(t, store, "k")
	rng := rand.New(rand.NewPCG(1, 2))
	tokyo := mustLocation(t, "Asia/Tokyo")
	ruleSets := [][]storekit.Rule{
		{bucket10x5, daily8},
		{bucketRule("", 3, 4), daily8, quotaRule("month", tollgate.Quota{Tokens: 30, Period: tollgate.Monthly, AnchorDay: 1})},
		{bucket10x2, bucketRule("b:x", 0.5, 3)},
		{bucketRule("", 1000, 3), quotaRule("day", daily(12, tokyo))},
		{quotaRule("day", daily(5, nil))},
		{bucket10x1},
		{bucketRule("", 10, 3), bucketRule("b:x", 2, 2), quotaRule("b:x:day", daily(6, tokyo))},
	}
	type grant struct {
		tw    twin
		rules []storekit.Rule
	}
	var grants []grant
	rules := ruleSets[0]
	for i := range 3000 {
		switch d := rng.IntN(100); {
		case d < 4:
			rules = ruleSets[rng.IntN(len(ruleSets))]
		case d < 7:
			clock.Advance(time.Duration(rng.Int64N(int64(30 * time.Hour))))
		default:
			clock.Advance(time.Duration(rng.Int64N(int64(300 * time.Millisecond))))
		}
		op := storekit.Op{Tenant: key, Rules: rules, Cost: 1 + rng.Int64N(2)}
		var modelMark int64
		var cancelled = -1
		switch d := rng.IntN(100); {
		case d < 55:
			op.Kind = take
			if rng.IntN(2) == 0 {
				op.MaxDelay = time.Duration(rng.Int64N(int64(2 * time.Second)))
			}
		case d < 70:
			op.Kind = inspect
		case d < 73:
			op.Kind = reset
			if rng.IntN(2) == 0 {
				op.Rules = rules[:1]
			}
		default:
			if len(grants) == 0 {
				op.Kind = inspect
				break
			}
			// A Limiter gives back a decision's reservation once, with
			// the rules and cost it was taken with.
			cancelled = rng.IntN(len(grants))
			g := grants[cancelled]
			op.Kind, op.Rules, op.Cost = cancel, g.rules, g.tw.got.Cost
			op.Mark, modelMark = g.tw.got.Mark, g.tw.want.Mark
		}
		for _, r := range op.Rules {
			if op.Cost > r.Burst {
				op.Cost = 1
			}
		}
		tw := do(t, store, &model, clock, op, modelMark, i%3 != 0)
		if cancelled >= 0 {
			grants = append(grants[:cancelled], grants[cancelled+1:]...)
		}
		if op.Kind == take && tw.got.Allowed {
			grants = append(grants, grant{tw, op.Rules})
			if len(grants) > 50 {
				grants = grants[1:]
			}
		}
	}
}

// runTakeIsOneRuleOp checks that Take and a Take Op of the main bucket
// alone decide on the same state: it alternates them on one tenant and
// compares both with Model.
func runTakeIsOneRuleOp(t *testing.T, newStore NewStore) {
	clock := NewClock()
	store := newStore(t, clock)
	tk := takerOf(t, store)
	key := tenant(t, store, "k")
	rng := rand.New(rand.NewPCG(3, 4))
	limits := []tollgate.Limit{twoPerSecond, tenPerSecond, threePerSec}
	var model Model
	for i := range 600 {
		limit := limits[rng.IntN(len(limits))]
		clock.Advance(time.Duration(rng.Int64N(400_000)) * time.Microsecond)
		cost := 1 + rng.Int64N(limit.Burst)
		if i%2 == 0 {
			got, err := tk.Take(ctx(), key, limit, cost)
			if err != nil {
				t.Fatalf("take %d: %v", i, err)
			}
			if want := modelTake(&model, key, limit, cost, clock.Now()); got != want {
				t.Fatalf("take %d (limit %v, cost %d): got %+v, the model says %+v", i, limit, cost, got, want)
			}
			continue
		}
		op := storekit.Op{Kind: take, Tenant: key, Rules: []storekit.Rule{storekit.BucketRule(limit.Rate, limit.Burst)}, Cost: cost}
		tw := do(t, store, &model, clock, op, 0, i%4 == 1)
		if tw.got.Allowed != tw.got.Results[0].Allowed {
			t.Fatalf("op %d: Allowed %v but its one result says %v", i, tw.got.Allowed, tw.got.Results[0].Allowed)
		}
	}
}
