package memory_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/core/storekit"
	"github.com/tollgate-go/tollgate/core/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clock *storetest.Clock) tollgate.Store {
		s := memory.New(memory.WithClock(clock.Now))
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// TestConformanceSmallCap runs the kit on a Store whose cap is so small
// that it evicts all the time: idle tenants first, then the least spent.
// The kit's cases each use a tenant or two at a time, which the cap
// keeps.
func TestConformanceSmallCap(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clock *storetest.Clock) tollgate.Store {
		s := memory.New(memory.WithClock(clock.Now), memory.WithMaxKeys(64), memory.WithSweepInterval(time.Millisecond))
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// TestWait runs the kit's checks of Limiter.Wait with
// storetest.WaitCallers goroutines on one Store on the system clock.
func TestWait(t *testing.T) {
	s := memory.New()
	t.Cleanup(func() { s.Close() })
	storetest.RunWait(t, []tollgate.Store{s})
}

var limit = tollgate.Limit{Rate: 10, Burst: 10} // full again 1s after the last take

func take(t *testing.T, s *memory.Store, key string, lim tollgate.Limit, cost int64) tollgate.Result {
	t.Helper()
	r, err := s.Take(context.Background(), key, lim, cost)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func do(t *testing.T, s *memory.Store, op *storekit.Op) *storekit.Op {
	t.Helper()
	if err := s.Do(context.Background(), op); err != nil {
		t.Fatal(err)
	}
	return op
}

func bucket(name string, lim tollgate.Limit) storekit.Rule {
	r := storekit.BucketRule(lim.Rate, lim.Burst)
	r.Name = name
	return r
}

func quota(name string, tokens int64) storekit.Rule {
	q := tollgate.Quota{Tokens: tokens, Period: tollgate.Daily}
	return storekit.Rule{Kind: storekit.Quota, Name: name, Burst: q.Tokens, Period: q.Bounds}
}

func TestInvalidOptions(t *testing.T) {
	cases := []struct {
		opts []memory.Option
		want string
	}{
		{[]memory.Option{memory.WithMaxKeys(0)}, "memory: WithMaxKeys must be >= 1, got 0"},
		{[]memory.Option{memory.WithMaxKeys(-3)}, "memory: WithMaxKeys must be >= 1, got -3"},
		{[]memory.Option{memory.WithClock(nil)}, "memory: WithClock needs a clock, got nil"},
		{[]memory.Option{memory.WithSweepInterval(0), nil}, "memory: option 1 of New is nil"},
		// The first invalid option is the one reported.
		{[]memory.Option{memory.WithMaxKeys(0), memory.WithClock(nil)}, "memory: WithMaxKeys must be >= 1, got 0"},
	}
	ctx := context.Background()
	for _, c := range cases {
		s := memory.New(c.opts...)
		err := s.Do(ctx, &storekit.Op{Kind: storekit.Check})
		if err == nil || !strings.HasSuffix(err.Error(), c.want) || !errors.Is(err, tollgate.ErrMisconfigured) {
			t.Errorf("Check: %v, want %q wrapping tollgate.ErrMisconfigured", err, c.want)
			continue
		}
		if _, terr := s.Take(ctx, "k", limit, 1); terr != err {
			t.Errorf("Take: %v, want Check's error %v", terr, err)
		}
		op := &storekit.Op{Kind: storekit.Take, Tenant: "k", Rules: []storekit.Rule{bucket("", limit)}, Cost: 1}
		if derr := s.Do(ctx, op); derr != err {
			t.Errorf("Do: %v, want Check's error %v", derr, err)
		}
		if s.Sweep() != 0 || s.Stats() != (storekit.Stats{}) || s.Close() != nil {
			t.Errorf("a misconfigured Store is not inert: %+v", s.Stats())
		}
	}
	// tollgate.New refuses a misconfigured Store.
	if _, err := tollgate.New(memory.New(memory.WithMaxKeys(0)), tollgate.SinglePlan(tollgate.DefaultPlans()[0])); !errors.Is(err, tollgate.ErrMisconfigured) {
		t.Fatalf("tollgate.New on a misconfigured Store: %v", err)
	}
	if err := memory.New(memory.WithMaxKeys(1), memory.WithSweepInterval(-1)).Do(ctx, &storekit.Op{Kind: storekit.Check}); err != nil {
		t.Fatalf("valid options: Check = %v", err)
	}
}

func TestZeroStore(t *testing.T) {
	var s memory.Store
	ctx := context.Background()
	err := s.Do(ctx, &storekit.Op{Kind: storekit.Check})
	if !errors.Is(err, tollgate.ErrMisconfigured) {
		t.Fatalf("the zero Store: Check = %v", err)
	}
	if _, terr := s.Take(ctx, "k", limit, 1); terr != err {
		t.Fatalf("Take on the zero Store: %v", terr)
	}
	if s.Sweep() != 0 || s.Stats() != (storekit.Stats{}) || s.Close() != nil {
		t.Fatal("the zero Store is not inert")
	}
}

// TestInvalidOps: an Op of a kind or with a rule that no Limiter makes is
// an error, and changes nothing.
func TestInvalidOps(t *testing.T) {
	s := memory.New(memory.WithSweepInterval(0))
	defer s.Close()
	good := bucket("", limit)
	for _, op := range []storekit.Op{
		{Kind: 0, Tenant: "k", Rules: []storekit.Rule{good}, Cost: 1},
		{Kind: 99, Tenant: "k", Rules: []storekit.Rule{good}, Cost: 1},
		{Kind: storekit.Take, Tenant: "k", Rules: []storekit.Rule{{Kind: storekit.Bucket, Burst: 5}}, Cost: 1},
		{Kind: storekit.Take, Tenant: "k", Rules: []storekit.Rule{good, {Kind: storekit.Quota, Name: "day", Burst: 5}}, Cost: 1},
		{Kind: storekit.Take, Tenant: "k", Rules: []storekit.Rule{good, {Kind: storekit.Bucket, Name: "x", Interval: 1}}, Cost: 1},
		{Kind: storekit.Take, Tenant: "k", Rules: []storekit.Rule{{Kind: 7, Burst: 1, Interval: 1}}, Cost: 1},
	} {
		if err := s.Do(context.Background(), &op); err == nil {
			t.Errorf("Do(%+v) = nil, want an error", op)
		}
	}
	if r := take(t, s, "k", limit, 10); !r.Allowed {
		t.Fatalf("invalid Ops changed the bucket: %+v", r)
	}
}

// TestTakeAndDoShareTheMainBucket: Take, a Take Op of the main bucket
// alone and an Op of several rules all draw from the same main bucket.
func TestTakeAndDoShareTheMainBucket(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0))
	defer s.Close()
	take(t, s, "k", limit, 3)
	one := do(t, s, &storekit.Op{Kind: storekit.Take, Tenant: "k", Rules: []storekit.Rule{bucket("", limit)}, Cost: 3})
	if one.Results[0].Remaining != 4 {
		t.Fatalf("a one-rule Op after a Take: %+v, want 4 left", one.Results)
	}
	two := do(t, s, &storekit.Op{Kind: storekit.Take, Tenant: "k", Rules: []storekit.Rule{bucket("", limit), quota("day", 100)}, Cost: 3})
	if two.Results[0].Remaining != 1 || two.Results[1].Remaining != 97 {
		t.Fatalf("an Op of two rules: %+v, want 1 and 97 left", two.Results)
	}
	if r := take(t, s, "k", limit, 2); r.Allowed {
		t.Fatalf("a Take after both: %+v, want a denial", r)
	}
}

// TestDoDecidesAtOpNow: a Store on the system clock decides an Op at its
// Now, whichever path the Op takes, even a Now from before the Store was
// made.
func TestDoDecidesAtOpNow(t *testing.T) {
	lim := tollgate.Limit{Rate: 1, Burst: 2}
	now := time.Now()
	s := memory.New(memory.WithSweepInterval(0))
	defer s.Close()
	for _, start := range []time.Time{now, now.Add(-time.Hour), now.Add(time.Hour)} {
		for _, rules := range [][]storekit.Rule{{bucket("", lim)}, {bucket("", lim), quota("day", 100)}} {
			key := fmt.Sprint(start, len(rules))
			op := func(cost int64, at time.Duration) *storekit.Op {
				return do(t, s, &storekit.Op{Kind: storekit.Take, Tenant: key, Rules: rules, Cost: cost, Now: start.Add(at)})
			}
			if op(2, 0).Allowed != true || op(1, 999*time.Millisecond).Allowed != false || op(1, time.Second).Allowed != true {
				t.Fatalf("%d rules at %v: a token did not come back exactly a second later", len(rules), start)
			}
		}
	}
}

// TestAllocations: a Take, and an Op, of a tenant the Store holds allocate
// nothing, whatever the Op, given Results with room for its rules, as the
// Limiter gives; tenant IDs longer than the Store keeps as they are
// included.
func TestAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates; run without -race")
	}
	s := memory.New(memory.WithSweepInterval(0))
	defer s.Close()
	ctx := context.Background()
	lim := tollgate.Limit{Rate: 100, Burst: 1e9}
	main, budget, day := bucket("", lim), bucket("b:reports", lim), quota("day", 1e12)
	long := strings.Repeat("x", 100)
	for _, key := range []string{"tenant-1", long} {
		take(t, s, key, lim, 1)
		if n := testing.AllocsPerRun(1000, func() { s.Take(ctx, key, lim, 1) }); n != 0 {
			t.Errorf("%v allocations a Take of a tracked tenant (%d bytes)", n, len(key))
		}
		ops := []storekit.Op{
			{Kind: storekit.Take, Rules: []storekit.Rule{main}},
			{Kind: storekit.Take, Rules: []storekit.Rule{main}, Now: time.Now()},
			{Kind: storekit.Inspect, Rules: []storekit.Rule{main}},
			{Kind: storekit.Take, Rules: []storekit.Rule{main}, MaxDelay: time.Second},
			{Kind: storekit.Take, Rules: []storekit.Rule{main, day}},
			{Kind: storekit.Take, Rules: []storekit.Rule{main, budget, day}, MaxDelay: time.Second, Now: time.Now()},
			{Kind: storekit.Inspect, Rules: []storekit.Rule{main, budget, day}},
		}
		for i := range ops {
			ops[i].Tenant, ops[i].Cost, ops[i].Results = key, 1, make([]storekit.Result, 0, 4)
			do(t, s, &ops[i])
		}
		for i := range ops {
			if n := testing.AllocsPerRun(1000, func() { s.Do(ctx, &ops[i]) }); n != 0 {
				t.Errorf("%v allocations an Op %d (%d rules) of a tracked tenant (%d bytes)", n, i, len(ops[i].Rules), len(key))
			}
		}
		// A request that holds a slot, and its Release, under leases
		// drawn beforehand as the Limiter draws them.
		c := storekit.Rule{Kind: storekit.InFlight, Name: "inflight", Burst: 10}
		flight := storekit.Op{Kind: storekit.Take, Tenant: key, Rules: []storekit.Rule{main, c}, Cost: 1, LeaseTTL: time.Minute,
			Results: make([]storekit.Result, 0, 4)}
		release := storekit.Op{Kind: storekit.Release, Tenant: key, Rules: []storekit.Rule{c}, Results: make([]storekit.Result, 0, 4)}
		leases := make([]string, 2000)
		for i := range leases {
			leases[i] = fmt.Sprint("lease-", i)
		}
		n := 0
		if a := testing.AllocsPerRun(1000, func() {
			flight.Lease, release.Lease = leases[n], leases[n]
			n++
			s.Do(ctx, &flight)
			s.Do(ctx, &release)
		}); a != 0 {
			t.Errorf("%v allocations a request that holds a slot of a tracked tenant (%d bytes)", a, len(key))
		}
	}
}

// TestConformanceSharedHashes runs the kit on a Store whose tenant IDs
// hash to one of four values: tenants that share a hash stay apart.
func TestConformanceSharedHashes(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clock *storetest.Clock) tollgate.Store {
		s := memory.NewColliding(4, memory.WithClock(clock.Now))
		t.Cleanup(func() { s.Close() })
		return s
	})
}
