package storetest

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// A NewMultiStore builds a fresh MultiStore that reads its time from clock.
// Stores that share a backend (Redis) may return a Store over the same
// backend each time: the kit gives every case keys of its own.
type NewMultiStore func(t *testing.T, clock *Clock) tollgate.MultiStore

// RunOps runs the kit's checks of tollgate.MultiStore.Do against the Stores
// that newStore builds: a decision table on the injected clock (several
// limits, quotas at period edges, monthly anchors, a time zone, plan
// changes, reservations and cancels, inspect, reset), a randomized
// comparison with Model, hostile keys, concurrency, and Take against a
// one-rule OpTake. Every decision is compared with Model's, figures
// included.
func RunOps(t *testing.T, newStore NewMultiStore) {
	t.Run("Decisions", func(t *testing.T) { RunOpsDecisions(t, newStore) })
	t.Run("Model", func(t *testing.T) { RunOpsModel(t, newStore) })
	t.Run("TakeIsOneRuleOp", func(t *testing.T) { RunTakeIsOneRuleOp(t, newStore) })
	t.Run("HostileKeys", func(t *testing.T) { RunOpsHostileKeys(t, newStore) })
	t.Run("Concurrency", func(t *testing.T) {
		clock := NewClock()
		RunOpsConcurrency(t, []tollgate.MultiStore{newStore(t, clock)}, clock)
	})
}

// NewClockAt returns a Clock set to t.
func NewClockAt(t time.Time) *Clock { return &Clock{start: t} }

// Set moves the clock to t, which must not be before its time.
func (c *Clock) Set(t time.Time) {
	if d := t.Sub(c.Now()); d > 0 {
		c.Advance(d)
	}
}

type opStep struct {
	advance time.Duration
	set     string // RFC 3339 time to move the clock to, if not ""
	kind    tollgate.OpKind
	rules   []tollgate.Rule // nil: the case's
	cost    int64           // 0: 1
	delay   time.Duration   // MaxDelay
	marksOf int             // a cancel: the step (1-based) whose Marks it gives back
	repeat  int

	allowed   bool
	wantDelay time.Duration
	remaining []int64         // per rule, if not nil
	retry     []time.Duration // per rule, if not nil
}

type opsCase struct {
	name  string
	start string // RFC 3339; "" is the Clock's default
	rules []tollgate.Rule
	steps []opStep
}

var (
	bucket10x5    = tollgate.Rule{Limit: tollgate.Limit{Rate: 10, Burst: 5}}
	daily8        = tollgate.Rule{Sub: "day", Quota: tollgate.PerDay(8)}
	main100       = tollgate.Rule{Limit: tollgate.Limit{Rate: 100, Burst: 100}}
	reportsHour   = tollgate.Rule{Sub: "b:reports", Limit: tollgate.Limit{Rate: 50.0 / 3600, Burst: 50}}
	bucket10x2    = tollgate.Rule{Limit: tollgate.Limit{Rate: 10, Burst: 2}}
	bucket10x1    = tollgate.Rule{Limit: tollgate.Limit{Rate: 10, Burst: 1}}
	take, inspect = tollgate.OpTake, tollgate.OpInspect
)

func quotaRule(sub string, q tollgate.Quota) tollgate.Rule { return tollgate.Rule{Sub: sub, Quota: q} }

func opsCases(t *testing.T) []opsCase {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatalf("no time zone database (import time/tzdata): %v", err)
	}
	ms := time.Millisecond
	return []opsCase{
		{
			name:  "bucket and daily quota",
			start: "2026-03-10T12:00:00Z",
			rules: []tollgate.Rule{bucket10x5, daily8},
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
			rules: []tollgate.Rule{main100, reportsHour},
			steps: []opStep{
				{kind: take, cost: 10, allowed: true, remaining: []int64{90, 40}},
				{kind: take, cost: 10, allowed: true, remaining: []int64{80, 30}},
				{kind: take, cost: 10, allowed: true, remaining: []int64{70, 20}},
				{kind: take, cost: 10, allowed: true, remaining: []int64{60, 10}},
				{kind: take, cost: 10, allowed: true, remaining: []int64{50, 0}},
				// 10 tokens of the budget come back in 720s.
				{kind: take, cost: 10, remaining: []int64{50, 0}, retry: []time.Duration{0, 720 * time.Second}},
				// The main bucket alone: the denied request spent none of it.
				{kind: take, rules: []tollgate.Rule{main100}, allowed: true, remaining: []int64{49}},
			},
		},
		{
			name:  "daily quota at the edge of a period",
			start: "2026-01-01T23:59:59.999998Z",
			rules: []tollgate.Rule{quotaRule("day", tollgate.PerDay(3))},
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
			rules: []tollgate.Rule{quotaRule("month", tollgate.Quota{Tokens: 2, Period: tollgate.Monthly, AnchorDay: 15})},
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
			rules: []tollgate.Rule{quotaRule("day", tollgate.Quota{Tokens: 1, Period: tollgate.Daily, Location: paris})},
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
			rules: []tollgate.Rule{bucket10x5, quotaRule("day", tollgate.PerDay(10))},
			steps: []opStep{
				{kind: take, cost: 3, allowed: true, remaining: []int64{2, 7}},
				{kind: take, cost: 3, allowed: true, remaining: []int64{2, 4}, advance: 500 * ms},
				// Upgraded: a bigger bucket and a bigger quota, the same usage.
				{kind: take, cost: 3, allowed: true, remaining: []int64{11, 11},
					rules: []tollgate.Rule{{Limit: tollgate.Limit{Rate: 20, Burst: 20}}, quotaRule("day", tollgate.PerDay(20))}},
				// Downgraded below the usage: nothing left today.
				{advance: time.Second, kind: take, remaining: []int64{5, 0}, retry: []time.Duration{0, 16*time.Hour - 1500*ms},
					rules: []tollgate.Rule{bucket10x5, quotaRule("day", tollgate.PerDay(5))}},
			},
		},
		{
			name:  "reservations within MaxDelay",
			rules: []tollgate.Rule{bucket10x2},
			steps: []opStep{
				{kind: take, delay: 250 * ms, allowed: true, remaining: []int64{1}},
				{kind: take, delay: 250 * ms, allowed: true, remaining: []int64{0}},
				{kind: take, delay: 250 * ms, allowed: true, wantDelay: 100 * ms, remaining: []int64{0}},
				{kind: take, delay: 250 * ms, allowed: true, wantDelay: 200 * ms, remaining: []int64{0}},
				// 300ms is beyond MaxDelay: denied, nothing reserved.
				{kind: take, delay: 250 * ms, retry: []time.Duration{300 * ms}, remaining: []int64{0}},
				{kind: inspect, delay: 300 * ms, allowed: true, wantDelay: 300 * ms, remaining: []int64{0}},
				{advance: 100 * ms, kind: take, delay: 250 * ms, allowed: true, wantDelay: 200 * ms},
			},
		},
		{
			name:  "a delay of exactly MaxDelay is granted",
			rules: []tollgate.Rule{bucket10x1},
			steps: []opStep{
				{kind: take, allowed: true, remaining: []int64{0}},
				{kind: take, delay: 100 * ms, allowed: true, wantDelay: 100 * ms, remaining: []int64{0}},
				{kind: take, delay: 200*ms - time.Microsecond, retry: []time.Duration{200 * ms}, remaining: []int64{0}},
				{kind: take, delay: 200 * ms, allowed: true, wantDelay: 200 * ms, remaining: []int64{0}},
			},
		},
		{
			name:  "a reservation of several tokens",
			rules: []tollgate.Rule{bucket10x2},
			steps: []opStep{
				{kind: take, cost: 2, delay: 250 * ms, allowed: true, remaining: []int64{0}},
				{kind: take, cost: 2, delay: 250 * ms, allowed: true, wantDelay: 200 * ms, remaining: []int64{0}},
				{kind: take, delay: 250 * ms, retry: []time.Duration{300 * ms}, remaining: []int64{0}},
				{advance: 50 * ms, kind: take, delay: 250 * ms, allowed: true, wantDelay: 250 * ms, remaining: []int64{0}},
			},
		},
		{
			name:  "a reservation waits for its slowest bucket",
			rules: []tollgate.Rule{bucket10x1, {Sub: "b:x", Limit: tollgate.Limit{Rate: 5, Burst: 1}}},
			steps: []opStep{
				/* 1 */ {kind: take, delay: time.Second, allowed: true, remaining: []int64{0, 0}},
				/* 2 */ {kind: take, delay: time.Second, allowed: true, wantDelay: 200 * ms, remaining: []int64{0, 0}},
				// The budget's bucket is 400ms out, past MaxDelay: neither
				// bucket reserves.
				/* 3 */ {kind: take, delay: 300 * ms, retry: []time.Duration{200 * ms, 400 * ms}, remaining: []int64{0, 0}},
				// The main bucket alone has a slot 200ms out.
				/* 4 */ {kind: inspect, rules: []tollgate.Rule{bucket10x1}, delay: 300 * ms, allowed: true, wantDelay: 200 * ms},
				// The latest reservation gives both buckets their tokens back.
				/* 5 */ {kind: tollgate.OpCancel, marksOf: 2, remaining: []int64{0, 0}},
				/* 6 */ {kind: inspect, delay: time.Second, allowed: true, wantDelay: 200 * ms, remaining: []int64{0, 0}},
				/* 7 */ {advance: 100 * ms, kind: take, delay: 150 * ms, allowed: true, wantDelay: 100 * ms, remaining: []int64{0, 0}},
			},
		},
		{
			name:  "a quota never reserves",
			rules: []tollgate.Rule{bucket10x2, quotaRule("day", tollgate.PerDay(3))},
			steps: []opStep{
				{kind: take, delay: time.Second, allowed: true, remaining: []int64{1, 2}},
				{kind: take, delay: time.Second, allowed: true, remaining: []int64{0, 1}},
				{kind: take, delay: time.Second, allowed: true, wantDelay: 100 * ms, remaining: []int64{0, 0}},
				{kind: take, delay: time.Second, remaining: []int64{0, 0}},
			},
		},
		{
			name:  "cancels",
			rules: []tollgate.Rule{bucket10x1, quotaRule("day", tollgate.PerDay(100))},
			steps: []opStep{
				/* 1 */ {kind: take, delay: time.Second, allowed: true, remaining: []int64{0, 99}},
				/* 2 */ {kind: take, delay: time.Second, allowed: true, wantDelay: 100 * ms, remaining: []int64{0, 98}},
				/* 3 */ {kind: take, delay: time.Second, allowed: true, wantDelay: 200 * ms, remaining: []int64{0, 97}},
				// Step 3's reservation depends on step 2's tokens: the
				// bucket gets nothing back, the quota its token.
				/* 4 */ {kind: tollgate.OpCancel, marksOf: 2, remaining: []int64{0, 98}},
				/* 5 */ {kind: inspect, delay: time.Second, allowed: true, wantDelay: 300 * ms, remaining: []int64{0, 98}},
				// The latest reservation gives all its tokens back.
				/* 6 */ {kind: tollgate.OpCancel, marksOf: 3, remaining: []int64{0, 99}},
				/* 7 */ {kind: inspect, delay: time.Second, allowed: true, wantDelay: 200 * ms, remaining: []int64{0, 99}},
				// Step 1 was no reservation: its time has come.
				/* 8 */ {kind: tollgate.OpCancel, marksOf: 1, remaining: []int64{0, 99}},
				/* 9 */ {advance: 150 * ms, kind: take, delay: time.Second, allowed: true, wantDelay: 50 * ms, remaining: []int64{0, 98}},
				/* 10 */ {kind: take, delay: time.Second, allowed: true, wantDelay: 150 * ms, remaining: []int64{0, 97}},
				// Once the reserved time has come, a cancel gives nothing back.
				/* 11 */ {advance: 200 * ms, kind: tollgate.OpCancel, marksOf: 10, remaining: []int64{0, 97}},
				/* 12 */ {kind: inspect, delay: time.Second, allowed: true, wantDelay: 50 * ms, remaining: []int64{0, 97}},
			},
		},
		{
			name:  "inspect takes nothing",
			rules: []tollgate.Rule{bucket10x5, daily8},
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
			rules: []tollgate.Rule{bucket10x5, daily8, reportsHour},
			steps: []opStep{
				{kind: take, cost: 5, allowed: true, remaining: []int64{0, 3, 45}},
				{kind: take, remaining: []int64{0, 3, 45}, retry: []time.Duration{100 * ms, 0, 0}},
				{kind: tollgate.OpReset, remaining: []int64{5, 8, 50}},
				{kind: take, cost: 5, allowed: true, remaining: []int64{0, 3, 45}},
			},
		},
	}
}

// RunOpsDecisions checks the decision table, each step against its stated
// figures and against Model.
func RunOpsDecisions(t *testing.T, newStore NewMultiStore) {
	for _, tc := range opsCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			clock := NewClock()
			if tc.start != "" {
				clock = NewClockAt(mustTime(t, tc.start))
			}
			store := newStore(t, clock)
			var model Model
			key := Key(t, "k")
			marks := map[int][]int64{}
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
					op := &tollgate.Op{Kind: s.kind, Key: key, Rules: rules, Cost: max(s.cost, 1), MaxDelay: s.delay}
					if s.marksOf > 0 {
						op.Marks = append([]int64(nil), marks[s.marksOf]...)
					}
					want := *op
					want.Marks = append([]int64(nil), marks[-s.marksOf]...)
					model.Do(&want, clock.Now())
					if err := store.Do(ctx(), op); err != nil {
						t.Fatalf("step %d: Do: %v", i+1, err)
					}
					where := fmt.Sprintf("step %d (%v #%d at %s)", i+1, s.kind, n, clock.Now().UTC().Format(time.RFC3339Nano))
					checkOp(t, where, op, &want)
					if op.Allowed != s.allowed || op.Delay != s.wantDelay {
						t.Fatalf("%s: allowed %v after %v, want %v after %v", where, op.Allowed, op.Delay, s.allowed, s.wantDelay)
					}
					for r := range s.remaining {
						if op.Results[r].Remaining != s.remaining[r] {
							t.Fatalf("%s: rule %d has %d left, want %d (%+v)", where, r, op.Results[r].Remaining, s.remaining[r], op.Results)
						}
					}
					for r := range s.retry {
						if op.Results[r].RetryAfter != s.retry[r] {
							t.Fatalf("%s: rule %d RetryAfter %v, want %v", where, r, op.Results[r].RetryAfter, s.retry[r])
						}
					}
					if op.Allowed && op.Kind == tollgate.OpTake {
						marks[i+1] = append([]int64(nil), op.Marks...)
						marks[-(i + 1)] = append([]int64(nil), want.Marks...)
					}
				}
			}
		})
	}
}

// checkOp compares a Store's answer with the Model's.
func checkOp(t *testing.T, where string, got, want *tollgate.Op) {
	t.Helper()
	if got.Allowed != want.Allowed || got.Delay != want.Delay {
		t.Fatalf("%s: allowed %v after %v; the model says %v after %v", where, got.Allowed, got.Delay, want.Allowed, want.Delay)
	}
	if fmt.Sprint(got.Results) != fmt.Sprint(want.Results) {
		t.Fatalf("%s: results %+v; the model says %+v", where, got.Results, want.Results)
	}
	if got.Kind == tollgate.OpTake && got.Allowed && len(got.Marks) != len(got.Rules) {
		t.Fatalf("%s: a granted take returned %d marks for %d rules", where, len(got.Marks), len(got.Rules))
	}
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// RunOpsModel drives a Store and Model side by side through a long
// pseudo-random sequence of Ops of every kind, rule sets that change (plan
// changes), costs, delays and clock steps that cross days and months, and
// checks that every answer is the same.
func RunOpsModel(t *testing.T, newStore NewMultiStore) {
	clock := NewClockAt(mustTime(t, "2026-01-31T22:00:00Z"))
	store := newStore(t, clock)
	var model Model
	key := Key(t, "k")
	rng := rand.New(rand.NewPCG(1, 2))
	tokyo, _ := time.LoadLocation("Asia/Tokyo")
	ruleSets := [][]tollgate.Rule{
		{bucket10x5, daily8},
		{{Limit: tollgate.Limit{Rate: 3, Burst: 4}}, daily8, quotaRule("month", tollgate.Quota{Tokens: 30, Period: tollgate.Monthly, AnchorDay: 1})},
		{bucket10x2, {Sub: "b:x", Limit: tollgate.Limit{Rate: 0.5, Burst: 3}}},
		{{Limit: tollgate.Limit{Rate: 1000, Burst: 3}}, quotaRule("day", tollgate.Quota{Tokens: 12, Period: tollgate.Daily, Location: tokyo})},
		{quotaRule("day", tollgate.PerDay(5))},
	}
	type granted struct{ got, want []int64 }
	var grants []granted
	rules := ruleSets[0]
	for i := range 1500 {
		switch d := rng.IntN(100); {
		case d < 3:
			rules = ruleSets[rng.IntN(len(ruleSets))]
			grants = nil // marks are for the rules they were made under
		case d < 6:
			clock.Advance(time.Duration(rng.Int64N(int64(30 * time.Hour))))
		default:
			clock.Advance(time.Duration(rng.Int64N(int64(300 * time.Millisecond))))
		}
		op := &tollgate.Op{Key: key, Rules: rules, Cost: 1 + rng.Int64N(2)}
		var wantMarks []int64
		switch d := rng.IntN(100); {
		case d < 60:
			op.Kind = tollgate.OpTake
			if rng.IntN(2) == 0 {
				op.MaxDelay = time.Duration(rng.Int64N(int64(time.Second)))
			}
		case d < 75:
			op.Kind = tollgate.OpInspect
			op.MaxDelay = time.Duration(rng.Int64N(int64(time.Second)))
		case d < 78:
			op.Kind = tollgate.OpReset
		default:
			if len(grants) == 0 {
				op.Kind = tollgate.OpInspect
				break
			}
			op.Kind = tollgate.OpCancel
			g := grants[rng.IntN(len(grants))]
			op.Marks, wantMarks = append([]int64(nil), g.got...), g.want
			op.Cost = 1 // grants below are of cost 1 only
		}
		if op.Kind == tollgate.OpTake {
			op.Cost = 1
		}
		for _, r := range rules {
			if r.IsQuota() && op.Cost > r.Quota.Tokens || !r.IsQuota() && op.Cost > r.Limit.Burst {
				op.Cost = 1
			}
		}
		want := *op
		want.Marks = append([]int64(nil), wantMarks...)
		model.Do(&want, clock.Now())
		if err := store.Do(ctx(), op); err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		checkOp(t, fmt.Sprintf("op %d (%v, cost %d, max delay %v, %d rules, at %s)", i, op.Kind, op.Cost, op.MaxDelay,
			len(rules), clock.Now().UTC().Format(time.RFC3339Nano)), op, &want)
		if op.Kind == tollgate.OpTake && op.Allowed {
			grants = append(grants, granted{append([]int64(nil), op.Marks...), append([]int64(nil), want.Marks...)})
		}
	}
}

// RunTakeIsOneRuleOp checks that Store.Take and an OpTake of one
// Rule{Limit: limit} make the same decisions on the same state: it
// alternates them on one key and compares both with tollgate.GCRA.
func RunTakeIsOneRuleOp(t *testing.T, newStore NewMultiStore) {
	clock := NewClock()
	store := newStore(t, clock)
	key := Key(t, "k")
	rng := rand.New(rand.NewPCG(3, 4))
	limits := []tollgate.Limit{twoPerSecond, tenPerSecond, threePerSec}
	var tat int64
	start := clock.Now()
	for i := range 600 {
		limit := limits[rng.IntN(len(limits))]
		clock.Advance(time.Duration(rng.Int64N(400_000)) * time.Microsecond)
		cost := 1 + rng.Int64N(limit.Burst)
		now := clock.Now().Sub(start).Microseconds() + 1
		newTAT, want := tollgate.GCRA(tat, now, limit, cost)
		if want.Allowed {
			tat = newTAT
		}
		var got tollgate.Result
		if i%2 == 0 {
			r, err := store.Take(ctx(), key, limit, cost)
			if err != nil {
				t.Fatalf("take %d: %v", i, err)
			}
			got = r
		} else {
			op := &tollgate.Op{Kind: tollgate.OpTake, Key: key, Rules: []tollgate.Rule{{Limit: limit}}, Cost: cost}
			if err := store.Do(ctx(), op); err != nil {
				t.Fatalf("op %d: %v", i, err)
			}
			if op.Allowed != op.Results[0].Allowed {
				t.Fatalf("op %d: Allowed %v but its one result says %v", i, op.Allowed, op.Results[0].Allowed)
			}
			got = op.Results[0]
		}
		if got != want {
			t.Fatalf("call %d (limit %v, cost %d): got %+v, GCRA says %+v", i, limit, cost, got, want)
		}
	}
}

// RunOpsHostileKeys checks that keys and rule names of any bytes keep their
// states apart: every rule of every key starts full.
func RunOpsHostileKeys(t *testing.T, newStore NewMultiStore) {
	store := newStore(t, NewClock())
	keys := []string{"", "{", "}", "{tenant}", "tenant", "tenant:day", "tenant}:day", "a\x00b", "日本", strings.Repeat("k", 100)}
	subs := []string{"day", "", ":", "{x}", "b:reports", "day:1"}
	for i, k := range keys {
		key := Key(t, "") + k
		var rules []tollgate.Rule
		for j, sub := range subs {
			if j%2 == 0 {
				rules = append(rules, tollgate.Rule{Sub: sub, Quota: tollgate.PerDay(3)})
			} else {
				rules = append(rules, tollgate.Rule{Sub: sub, Limit: tollgate.Limit{Rate: 1, Burst: 3}})
			}
		}
		op := &tollgate.Op{Kind: tollgate.OpTake, Key: key, Rules: rules, Cost: 3}
		if err := store.Do(ctx(), op); err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
		if !op.Allowed {
			t.Fatalf("key %d (%q) shares a state with an earlier key or rule: %+v", i, k, op.Results)
		}
		for r := range rules {
			if op.Results[r].Remaining != 0 {
				t.Fatalf("key %d (%q), rule %d: %d left after taking all 3: rules share a state", i, k, r, op.Results[r].Remaining)
			}
		}
	}
}

// RunOpsConcurrency hammers one key with several limits from 64 goroutines
// spread over stores, which share one backend and clock: with the clock
// stopped exactly as many requests are allowed as the tightest limit lets
// through, and afterwards every limit holds exactly what the allowed
// requests took (a denied request spent from none); reservations made all
// at once each get a slot of their own; with the clock moving, no limit is
// ever exceeded. Stores over a backend of their own must be passed one at a
// time.
func RunOpsConcurrency(t *testing.T, stores []tollgate.MultiStore, clock *Clock) {
	const workers = 64
	run := func(t *testing.T, rules []tollgate.Rule, each int, step time.Duration) (allowed int64, elapsed time.Duration) {
		key := Key(t, "k")
		var ok, failed atomic.Int64
		var taken atomic.Int64
		var wg sync.WaitGroup
		permits := make(chan struct{}, workers)
		for w := range workers {
			s := stores[w%len(stores)]
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range permits {
					op := &tollgate.Op{Kind: tollgate.OpTake, Key: key, Rules: rules, Cost: 1}
					if err := s.Do(ctx(), op); err != nil {
						failed.Add(1)
					} else if op.Allowed {
						ok.Add(1)
					}
					taken.Add(1)
				}
			}()
		}
		for n := int64(1); n <= int64(each); n++ {
			for range workers {
				permits <- struct{}{}
			}
			for taken.Load() < n*workers {
				time.Sleep(50 * time.Microsecond)
			}
			clock.Advance(step)
			elapsed += step
		}
		close(permits)
		wg.Wait()
		if failed.Load() > 0 {
			t.Fatalf("%d Ops failed", failed.Load())
		}
		// Inspect: each limit holds exactly what was taken.
		op := &tollgate.Op{Kind: tollgate.OpInspect, Key: key, Rules: rules, Cost: 1}
		if err := stores[0].Do(ctx(), op); err != nil {
			t.Fatal(err)
		}
		if step == 0 {
			for i, r := range rules {
				var want int64
				if r.IsQuota() {
					want = r.Quota.Tokens - ok.Load()
				} else {
					want = r.Limit.Burst - ok.Load()
				}
				if got := op.Results[i].Remaining; got != max(want, 0) {
					t.Fatalf("rule %d (%+v) has %d left after %d allowed requests, want %d: a denied request spent from it",
						i, r, got, ok.Load(), max(want, 0))
				}
			}
		}
		return ok.Load(), elapsed
	}
	t.Run("stopped clock, quota tightest", func(t *testing.T) {
		rules := []tollgate.Rule{{Limit: tollgate.Limit{Rate: 100, Burst: 50}}, quotaRule("day", tollgate.PerDay(40)),
			{Sub: "b:x", Limit: tollgate.Limit{Rate: 1000, Burst: 1000}}}
		if got, _ := run(t, rules, 20, 0); got != 40 {
			t.Fatalf("allowed %d, want exactly the quota's 40", got)
		}
	})
	t.Run("stopped clock, bucket tightest", func(t *testing.T) {
		rules := []tollgate.Rule{{Limit: tollgate.Limit{Rate: 100, Burst: 50}}, quotaRule("day", tollgate.PerDay(1000)),
			{Sub: "b:x", Limit: tollgate.Limit{Rate: 1, Burst: 70}}}
		if got, _ := run(t, rules, 20, 0); got != 50 {
			t.Fatalf("allowed %d, want exactly the burst of 50", got)
		}
	})
	t.Run("stopped clock, reservations", func(t *testing.T) {
		runReservations(t, stores)
	})
	t.Run("moving clock", func(t *testing.T) {
		rules := []tollgate.Rule{{Limit: tollgate.Limit{Rate: 100, Burst: 20}}, quotaRule("day", tollgate.PerDay(150)),
			{Sub: "b:x", Limit: tollgate.Limit{Rate: 60, Burst: 40}}}
		got, elapsed := run(t, rules, 200, 10*time.Millisecond)
		// 2s: the budget bucket allows 40 + 60 x 2 = 160, the quota 150.
		ceiling := min(int64(150), 40+int64(60*elapsed.Seconds()), 20+int64(100*elapsed.Seconds()))
		if got > ceiling {
			t.Fatalf("allowed %d in %v; the tightest limit allows %d", got, elapsed, ceiling)
		}
		if got < ceiling*9/10 {
			t.Fatalf("allowed only %d in %v, want nearly %d", got, elapsed, ceiling)
		}
		t.Logf("allowed %d of a possible %d", got, ceiling)
	})
}

// runReservations has 64 goroutines spread over stores reserve one token
// each, at once, on a stopped clock, from a bucket of 5 at 10/s with a
// MaxDelay of 1s: exactly 15 are granted, each a slot of its own (five now,
// then one every 100ms up to 1s), so that together they never exceed the
// rate; the rest are denied and spend nothing, not even from the quota.
func runReservations(t *testing.T, stores []tollgate.MultiStore) {
	const workers = 64
	rules := []tollgate.Rule{{Limit: tollgate.Limit{Rate: 10, Burst: 5}}, quotaRule("day", tollgate.PerDay(1000))}
	key := Key(t, "k")
	delays := make(chan time.Duration, workers)
	var failed atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range workers {
		s := stores[w%len(stores)]
		wg.Go(func() {
			<-start
			op := &tollgate.Op{Kind: tollgate.OpTake, Key: key, Rules: rules, Cost: 1, MaxDelay: time.Second}
			if err := s.Do(ctx(), op); err != nil {
				failed.Add(1)
			} else if op.Allowed {
				delays <- op.Delay
			}
		})
	}
	close(start)
	wg.Wait()
	close(delays)
	if failed.Load() > 0 {
		t.Fatalf("%d Ops failed", failed.Load())
	}
	slots := map[time.Duration]int{}
	granted := 0
	for d := range delays {
		slots[d]++
		granted++
	}
	if granted != 15 {
		t.Fatalf("%d reservations granted, want 15: 5 now and 10 within 1s (slots %v)", granted, slots)
	}
	for k := 1; k <= 10; k++ {
		if d := time.Duration(k) * 100 * time.Millisecond; slots[d] != 1 {
			t.Fatalf("%d reservations for the slot %v out, want exactly 1 (slots %v)", slots[d], d, slots)
		}
	}
	if slots[0] != 5 {
		t.Fatalf("%d requests granted without a delay, want the burst of 5 (slots %v)", slots[0], slots)
	}
	op := &tollgate.Op{Kind: tollgate.OpInspect, Key: key, Rules: rules, Cost: 1, MaxDelay: 2 * time.Second}
	if err := stores[0].Do(ctx(), op); err != nil {
		t.Fatal(err)
	}
	if op.Delay != 1100*time.Millisecond || op.Results[1].Remaining != 1000-15 {
		t.Fatalf("after the reservations: next slot %v out and %d left of the quota, want 1.1s and %d",
			op.Delay, op.Results[1].Remaining, 1000-15)
	}
}
