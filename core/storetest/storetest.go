// Package storetest is the conformance kit for tollgate stores: Model, the
// reference meaning of every storekit Op; ModelStore, Model as a store for
// tests whose subject is not the store; a manual Clock; and the checks
// that every store must pass, figures included.
//
// A store's tests call Run with a function that builds a fresh store
// reading its time from the given Clock:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T, clock *storetest.Clock) tollgate.Store {
//			s := memory.New(memory.WithClock(clock.Now))
//			t.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
//
// The store must also have the Take method that both of tollgate's stores
// keep, Take(ctx, key, limit, cost) (tollgate.Result, error): the kit
// checks it against a one-rule Take Op. Stores that share a backend
// (Redis) may return a store over the same backend every time: every case
// uses tenants of its own (see Key), releases the slots it took and resets
// its tenants when it ends, so that a run leaves nothing behind. A store that has a clock of its own must be
// made to read the Clock; an Op's Now is the Clock's time or zero.
//
// RunConcurrency runs the concurrency checks over several stores that
// share one backend, as replicas do, RunInFlight has them run many
// requests under a cap on requests in flight, and RunWait checks
// Limiter.Wait over them on the real clock.
package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/storekit"
)

// A NewStore builds a fresh store that reads its time from clock. Stores
// that share a backend (Redis) may return a store over the same backend
// each time.
type NewStore func(t *testing.T, clock *Clock) tollgate.Store

// A taker is the Take method both of tollgate's stores keep.
type taker interface {
	Take(ctx context.Context, key string, limit tollgate.Limit, cost int64) (tollgate.Result, error)
}

// Run runs every check of the kit that works on an injected clock against
// the stores newStore builds: a table of token-bucket decisions, GCRA's
// properties, invalid input, hostile keys, a table of Ops and a long random
// run of them compared with Model, Take against a one-rule Op, the
// extremes of the limits, caps on requests in flight (slots, leases that
// end, hostile leases, a random run against Model), Limiter cases (plan
// changes, reset, slots, waiters that give up) and the concurrency checks
// of RunConcurrency on one store.
func Run(t *testing.T, newStore NewStore) {
	t.Run("Decisions", func(t *testing.T) { runDecisions(t, newStore) })
	t.Run("GCRA", func(t *testing.T) { runGCRA(t, newStore) })
	t.Run("InvalidInput", func(t *testing.T) { runInvalidInput(t, newStore) })
	t.Run("HostileKeys", func(t *testing.T) { runHostileKeys(t, newStore) })
	t.Run("Check", func(t *testing.T) {
		if err := newStore(t, NewClock()).Do(ctx(), &storekit.Op{Kind: storekit.Check}); err != nil {
			t.Fatalf("Check: %v", err)
		}
	})
	t.Run("Ops", func(t *testing.T) { runOps(t, newStore) })
	t.Run("Model", func(t *testing.T) { runModel(t, newStore) })
	t.Run("TakeIsOneRuleOp", func(t *testing.T) { runTakeIsOneRuleOp(t, newStore) })
	t.Run("Extremes", func(t *testing.T) { runExtremes(t, newStore) })
	t.Run("InFlight", func(t *testing.T) { runInFlight(t, newStore) })
	t.Run("Limiter", func(t *testing.T) { runLimiter(t, newStore) })
	t.Run("Concurrency", func(t *testing.T) {
		clock := NewClock()
		RunConcurrency(t, []tollgate.Store{newStore(t, clock)}, clock)
	})
}

// keyPrefix keeps the tenants of one run apart from those of other runs
// against a shared backend.
var keyPrefix = fmt.Sprintf("storetest:%d:", time.Now().UnixNano())

// Key returns a tenant ID unique to this run of the kit, the test t and
// name. It is at most 200 bytes long, without control characters, so that
// a Limiter accepts it.
func Key(t testing.TB, name string) string {
	k := keyPrefix + t.Name() + ":" + name
	if len(k) > 200 {
		sum := sha256.Sum256([]byte(t.Name()))
		k = keyPrefix + hex.EncodeToString(sum[:12]) + ":" + name
	}
	return k
}

// forget resets tenant in store when t ends: Reset forgets every rule of a
// tenant, named or not, so a store over a shared backend keeps nothing of
// the run.
func forget(t testing.TB, store tollgate.Store, tenant string) {
	t.Cleanup(func() {
		op := &storekit.Op{Kind: storekit.Reset, Tenant: tenant, Rules: []storekit.Rule{storekit.BucketRule(1, 1)}, Cost: 1}
		if err := store.Do(ctx(), op); err != nil {
			t.Errorf("resetting %q at the end of the test: %v", tenant, err)
		}
	})
}

// tenant returns Key(t, name), which store forgets when t ends.
func tenant(t testing.TB, store tollgate.Store, name string) string {
	k := Key(t, name)
	forget(t, store, k)
	return k
}

// patientContext has a deadline that is always ten seconds away and is
// never done: a store that applies a timeout of its own to calls without a
// deadline must not fail a decision test because a shared machine stalled.
type patientContext struct{ context.Context }

func (patientContext) Deadline() (time.Time, bool) { return time.Now().Add(10 * time.Second), true }

func ctx() context.Context { return patientContext{context.Background()} }

// takerOf returns store's Take method, or fails t.
func takerOf(t testing.TB, store tollgate.Store) taker {
	t.Helper()
	tk, ok := store.(taker)
	if !ok {
		t.Fatalf("%T has no Take(ctx, key, limit, cost) method; tollgate's stores keep it", store)
	}
	return tk
}

const ms = time.Millisecond

var (
	twoPerSecond = tollgate.Limit{Rate: 2, Burst: 5}   // a token every 500ms, 2.5s to refill
	tenPerSecond = tollgate.Limit{Rate: 10, Burst: 20} // a token every 100ms, 2s to refill
	freePlan     = tollgate.Limit{Rate: 2, Burst: 20}
	enterprise   = tollgate.Limit{Rate: 200, Burst: 2000}
	threePerSec  = tollgate.Limit{Rate: 3, Burst: 3} // not a divisor of a million: 333334µs a token
)

func allow(remaining int64, reset time.Duration) tollgate.Result {
	return tollgate.Result{Allowed: true, Remaining: remaining, ResetAfter: reset}
}

func deny(remaining int64, retry, reset time.Duration) tollgate.Result {
	return tollgate.Result{Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

// A step is one Take in a case of the decision table.
type step struct {
	advance time.Duration // move the clock before taking
	limit   *tollgate.Limit
	cost    int64
	want    tollgate.Result
	repeat  int // take this many times, each expecting want (0 means once)
}

var decisionTable = []struct {
	name  string
	limit tollgate.Limit
	steps []step
}{
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
		limit: threePerSec,
		steps: []step{
			{cost: 3, want: allow(0, 1000002*time.Microsecond)},
			{advance: 333333 * time.Microsecond, cost: 1, want: deny(0, time.Microsecond, 666669*time.Microsecond)},
			{advance: time.Microsecond, cost: 1, want: allow(0, 1000002*time.Microsecond)},
		},
	},
}

// runDecisions checks the decision table of Take: burst exhaustion, refill
// timing, costs greater than one, remaining and reset figures, and limits
// that change between calls.
func runDecisions(t *testing.T, newStore NewStore) {
	for _, tc := range decisionTable {
		t.Run(tc.name, func(t *testing.T) {
			clock := NewClock()
			store := newStore(t, clock)
			tk := takerOf(t, store)
			key := tenant(t, store, "k")
			limit := tc.limit
			for i, s := range tc.steps {
				clock.Advance(s.advance)
				if s.limit != nil {
					limit = *s.limit
				}
				for n := range max(s.repeat, 1) {
					got, err := tk.Take(ctx(), key, limit, s.cost)
					if err != nil {
						t.Fatalf("step %d: Take: %v", i+1, err)
					}
					if got != s.want {
						t.Fatalf("step %d (take %d): got %+v, want %+v", i+1, n, got, s.want)
					}
				}
			}
		})
	}
}

// modelTake is what Model answers to a Take of cost from key's bucket
// under limit at now.
func modelTake(m *Model, key string, limit tollgate.Limit, cost int64, now time.Time) tollgate.Result {
	op := &storekit.Op{Kind: storekit.Take, Tenant: key, Rules: []storekit.Rule{storekit.BucketRule(limit.Rate, limit.Burst)}, Cost: cost}
	m.Do(op, now)
	return op.Results[0]
}

// runGCRA drives Take and Model side by side through a long pseudo-random
// sequence of costs, limits and clock steps, and checks GCRA's properties
// on the way: a denial's RetryAfter is the exact time until the same
// request is allowed, ResetAfter the exact time until the bucket is full,
// and Remaining never more than the burst.
func runGCRA(t *testing.T, newStore NewStore) {
	clock := NewClock()
	store := newStore(t, clock)
	tk := takerOf(t, store)
	key, probe := tenant(t, store, "k"), tenant(t, store, "probe")
	limits := []tollgate.Limit{twoPerSecond, tenPerSecond, threePerSec, {Rate: 0.5, Burst: 7}, {Rate: 1000, Burst: 1}}
	rng := rand.New(rand.NewPCG(5, 6))
	var model Model
	take := func(key string, limit tollgate.Limit, cost int64) tollgate.Result {
		t.Helper()
		got, err := tk.Take(ctx(), key, limit, cost)
		if err != nil {
			t.Fatalf("Take: %v", err)
		}
		if want := modelTake(&model, key, limit, cost, clock.Now()); got != want {
			t.Fatalf("Take(%v, cost %d) at %v: got %+v, the model says %+v", limit, cost, clock.Now().Format(time.RFC3339Nano), got, want)
		}
		if got.Remaining > limit.Burst || got.Remaining < 0 {
			t.Fatalf("Take(%v, cost %d): %d remaining", limit, cost, got.Remaining)
		}
		return got
	}
	limit := limits[0]
	for i := range 2000 {
		if rng.IntN(50) == 0 {
			limit = limits[rng.IntN(len(limits))]
		}
		clock.Advance(time.Duration(rng.Int64N(400_000)) * time.Microsecond)
		take(key, limit, 1+rng.Int64N(limit.Burst))

		if i%20 != 0 {
			continue
		}
		// The properties, on a bucket of their own.
		cost := 1 + rng.Int64N(limit.Burst)
		r := take(probe, limit, cost)
		if r.Allowed {
			clock.Advance(r.ResetAfter)
			if full := take(probe, limit, 1); full.Remaining != limit.Burst-1 {
				t.Fatalf("%v: ResetAfter %v passed, but the bucket is not full: %+v", limit, r.ResetAfter, full)
			}
			continue
		}
		clock.Advance(r.RetryAfter - time.Microsecond)
		if again := take(probe, limit, cost); again.Allowed || again.RetryAfter != time.Microsecond {
			t.Fatalf("%v: a microsecond before RetryAfter %v: %+v, want a denial with a microsecond to go", limit, r.RetryAfter, again)
		}
		clock.Advance(time.Microsecond)
		if again := take(probe, limit, cost); !again.Allowed {
			t.Fatalf("%v: RetryAfter %v passed, and the same request is denied: %+v", limit, r.RetryAfter, again)
		}
	}
}

// runInvalidInput checks that invalid limits and costs are errors wrapping
// tollgate.ErrInvalidLimit that name the field at fault, and that they take
// nothing.
func runInvalidInput(t *testing.T, newStore NewStore) {
	store := newStore(t, NewClock())
	tk := takerOf(t, store)
	key := tenant(t, store, "k")
	cases := []struct {
		limit tollgate.Limit
		cost  int64
		field string
	}{
		{tollgate.Limit{Rate: 0, Burst: 5}, 1, "Rate"},
		{tollgate.Limit{Rate: -1, Burst: 5}, 1, "Rate"},
		{tollgate.Limit{Rate: nan(), Burst: 5}, 1, "Rate"},
		{tollgate.Limit{Rate: 2e6, Burst: 5}, 1, "Rate"},
		{tollgate.Limit{Rate: 2, Burst: 0}, 1, "Burst"},
		{tollgate.Limit{Rate: 2, Burst: 1e15}, 1, "Burst"},
		{tollgate.Limit{Rate: 1e-9, Burst: 5}, 1, "Burst/Rate"},
		{twoPerSecond, 0, "cost"},
		{twoPerSecond, -3, "cost"},
		{twoPerSecond, 6, "cost"},
	}
	for _, c := range cases {
		_, err := tk.Take(ctx(), key, c.limit, c.cost)
		if !errors.Is(err, tollgate.ErrInvalidLimit) {
			t.Errorf("Take(%+v, cost %d): err = %v, want tollgate.ErrInvalidLimit", c.limit, c.cost, err)
			continue
		}
		if !strings.Contains(err.Error(), c.field) {
			t.Errorf("Take(%+v, cost %d): error %q does not name %s", c.limit, c.cost, err, c.field)
		}
	}
	got, err := tk.Take(ctx(), key, twoPerSecond, 5)
	if err != nil || got != allow(0, 2500*ms) {
		t.Fatalf("after invalid calls the bucket must be untouched: got %+v, %v", got, err)
	}
}

// runHostileKeys checks that tenant IDs of any bytes and length work, and
// that distinct IDs, however alike, never share a bucket; and that rule
// names of any bytes keep their states apart.
func runHostileKeys(t *testing.T, newStore NewStore) {
	store := newStore(t, NewClock())
	tk := takerOf(t, store)
	long := strings.Repeat("x", 1<<20)
	keys := []string{
		"", "\x00", "\x00\x00", "a\x00b", "{", "}", "{tenant}", "{tenant}x", "tenant", "tenant ",
		"tenant\n", "\xff\xfe", "日本語テナント", "%s%d", "../../etc/passwd", "*", "?", ":", "tenant:day",
		strings.Repeat("k", 63), strings.Repeat("k", 64), strings.Repeat("k", 65),
		strings.Repeat("k", 255), strings.Repeat("k", 256), strings.Repeat("k", 257),
		strings.Repeat("\x00", 256), strings.Repeat("\x00", 257),
		long, long + "y", long[:len(long)-1] + "z",
	}
	prefix := Key(t, "")
	// Exhaust each key in turn; every later key must still be full.
	for i, k := range keys {
		key := prefix + k
		forget(t, store, key)
		got, err := tk.Take(ctx(), key, twoPerSecond, 5)
		if err != nil {
			t.Fatalf("key %d (%d bytes): %v", i, len(key), err)
		}
		if got != allow(0, 2500*ms) {
			t.Fatalf("key %d (%d bytes) shares a bucket with an earlier key: got %+v", i, len(key), got)
		}
		got, err = tk.Take(ctx(), key, twoPerSecond, 1)
		if err != nil || got.Allowed {
			t.Fatalf("key %d (%d bytes) should be exhausted: got %+v, %v", i, len(key), got, err)
		}
	}
	// Every rule of every key starts full: no key or rule name, made of
	// the very bytes another's state might be kept under, reaches it.
	names := []string{"day", "", ":", "{x}", "b:reports", "day:1", "\x00", strings.Repeat("n", 300)}
	for i, k := range keys[:len(keys)-3] {
		key := prefix + "rules:" + k
		forget(t, store, key)
		var rules []storekit.Rule
		for j, name := range names {
			if j%2 == 0 {
				rules = append(rules, quotaRule(name, tollgate.Quota{Tokens: 3, Period: tollgate.Daily}))
			} else {
				rules = append(rules, bucketRule(name, 1, 3))
			}
		}
		op := &storekit.Op{Kind: storekit.Take, Tenant: key, Rules: rules, Cost: 3}
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

func nan() float64 {
	zero := 0.0
	return zero / zero
}
