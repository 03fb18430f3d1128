package redisstore_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/redisstore"
	"github.com/tollgate-go/tollgate/core/storekit"
	"github.com/tollgate-go/tollgate/core/storetest"
)

// The Store against storetest.Model: the same Ops at the same times (the
// script reads the test's clock) must give the same decisions and figures.

// A step advances the clock, then applies op. For a Cancel, cancels names
// the earlier step whose reservation it gives back.
type step struct {
	advance time.Duration
	op      storekit.Op
	cancels int
}

// compareWithModel runs steps on a fresh Store on client and on a Model,
// and fails t at the first difference.
func compareWithModel(t *testing.T, client redis.UniversalClient, steps []step, opts ...redisstore.Option) {
	t.Helper()
	clock := storetest.NewClockAt(time.Date(2026, 3, 29, 0, 30, 0, 0, time.UTC))
	s := newStore(t, client, append([]redisstore.Option{redisstore.WithTestClock(clock.Now)}, opts...)...)
	var model storetest.Model
	marks := make([]int64, len(steps))
	for i, st := range steps {
		clock.Advance(st.advance)
		want, got := st.op, st.op
		want.Rules, got.Rules = slices.Clone(st.op.Rules), slices.Clone(st.op.Rules)
		if st.op.Kind == storekit.Cancel {
			want.Mark, got.Mark = marks[st.cancels], marks[st.cancels]
		}
		model.Do(&want, clock.Now())
		do(t, s, &got)
		if want.Kind == storekit.Take && want.Allowed {
			marks[i] = want.Mark
		}
		if d := diff(&want, &got); d != "" {
			t.Fatalf("step %d at %v: %v of %q, cost %d, max delay %v, rules %s:\n%s",
				i, clock.Now().Format(time.RFC3339Nano), st.op.Kind, st.op.Tenant, st.op.Cost, st.op.MaxDelay, describe(st.op.Rules), d)
		}
	}
}

func diff(want, got *storekit.Op) string {
	var out string
	if want.Allowed != got.Allowed || want.Delay != got.Delay {
		out += fmt.Sprintf("allowed %v delay %v, want %v delay %v\n", got.Allowed, got.Delay, want.Allowed, want.Delay)
	}
	if want.Kind == storekit.Take && want.Allowed && want.Mark != got.Mark {
		out += fmt.Sprintf("mark %d, want %d\n", got.Mark, want.Mark)
	}
	if !slices.Equal(want.Results, got.Results) {
		out += fmt.Sprintf("results\n  %+v\nwant\n  %+v\n", got.Results, want.Results)
	}
	return out
}

func describe(rules []storekit.Rule) string {
	s := ""
	for _, r := range rules {
		if r.Kind == storekit.Quota {
			s += fmt.Sprintf("[quota %q %d] ", r.Name, r.Burst)
		} else {
			s += fmt.Sprintf("[bucket %q %d every %dµs] ", r.Name, r.Burst, r.Interval)
		}
	}
	return s
}

// randomSteps makes n steps of Ops on a few tenants whose plans change
// from step to step: limits of the main bucket, quotas whose calendar moves
// to another time zone, reservations and their cancels, resets.
func randomSteps(seed uint64, n int) []step {
	rng := rand.New(rand.NewPCG(seed, 1))
	paris, tokyo := mustLoad("Europe/Paris"), mustLoad("Asia/Tokyo")
	mains := []storekit.Rule{bucket("", 10, 5), bucket("", 2, 20), bucket("", 1000, 3), bucket("", 0.5, 2)}
	others := []storekit.Rule{
		bucket("r:x", 5, 3),
		quota("day", 20, tollgate.Quota{Tokens: 20, Period: tollgate.Daily}.Bounds),
		quota("day", 12, tollgate.Quota{Tokens: 12, Period: tollgate.Daily, Location: tokyo}.Bounds),
		quota("month", 50, tollgate.Quota{Tokens: 50, Period: tollgate.Monthly, Location: paris, AnchorDay: 15}.Bounds),
		bucket("b:reports", 0.01, 4),
	}
	tenants := []string{"acme", "globex", "initech"}
	steps := make([]step, 0, n)
	var delayed []int // steps that may have reserved
	for len(steps) < n {
		var st step
		switch p := rng.IntN(10); {
		case p < 3:
		case p < 7:
			st.advance = time.Duration(rng.Int64N(int64(2 * time.Second)))
		case p < 9:
			st.advance = time.Duration(rng.Int64N(int64(time.Minute)))
		default:
			st.advance = time.Duration(rng.Int64N(int64(40 * 24 * time.Hour)))
		}
		rules := []storekit.Rule{mains[rng.IntN(len(mains))]}
		for _, i := range rng.Perm(len(others))[:rng.IntN(3)] {
			if rules[len(rules)-1].Name != others[i].Name && !slices.ContainsFunc(rules, func(r storekit.Rule) bool { return r.Name == others[i].Name }) {
				rules = append(rules, others[i])
			}
		}
		minBurst := rules[0].Burst
		for _, r := range rules {
			minBurst = min(minBurst, r.Burst)
		}
		st.op = storekit.Op{Tenant: tenants[rng.IntN(len(tenants))], Rules: rules, Cost: 1 + rng.Int64N(minBurst)}
		switch p := rng.IntN(20); {
		case p < 9:
			st.op.Kind = storekit.Take
		case p < 13:
			st.op.Kind = storekit.Take
			st.op.MaxDelay = time.Duration(rng.Int64N(int64(10 * time.Second)))
			delayed = append(delayed, len(steps))
		case p < 15:
			st.op.Kind = storekit.Inspect
		case p < 16:
			st.op.Kind = storekit.Reset
		default:
			if len(delayed) == 0 {
				st.op.Kind = storekit.Take
				break
			}
			i := delayed[rng.IntN(len(delayed))]
			st.op = storekit.Op{Kind: storekit.Cancel, Tenant: steps[i].op.Tenant, Rules: steps[i].op.Rules, Cost: steps[i].op.Cost}
			st.cancels = i
		}
		steps = append(steps, st)
	}
	return steps
}

func mustLoad(name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		panic(err)
	}
	return loc
}

func TestModelRandom(t *testing.T) {
	client := sharedClient(t)
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			compareWithModel(t, client, randomSteps(seed, 400))
		})
	}
}
