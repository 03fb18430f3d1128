package memory_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adaptertest"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/core/storetest"
)

func TestOpsConformance(t *testing.T) {
	storetest.RunOps(t, func(t *testing.T, clock *storetest.Clock) tollgate.MultiStore {
		s := memory.New(memory.WithClock(clock.Now))
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// do runs an Op and fails the test if Do fails.
func do(t *testing.T, s *memory.Store, op *tollgate.Op) *tollgate.Op {
	t.Helper()
	if err := s.Do(context.Background(), op); err != nil {
		t.Fatalf("Do(%v): %v", op.Kind, err)
	}
	return op
}

// TestOpsShareTakesMainBucket: an Op of several rules draws its main rule
// from the bucket that Take keeps under the key, both ways.
func TestOpsShareTakesMainBucket(t *testing.T) {
	s := memory.New(memory.WithSweepInterval(0))
	defer s.Close()
	lim := tollgate.Limit{Rate: 1, Burst: 5} // nothing refills within the test
	rules := []tollgate.Rule{{Limit: lim}, {Sub: "day", Quota: tollgate.PerDay(100)}}
	if r := take2(t, s, "k", lim, 3); !r.Allowed {
		t.Fatalf("Take: %+v", r)
	}
	op := do(t, s, &tollgate.Op{Kind: tollgate.OpTake, Key: "k", Rules: rules, Cost: 3})
	if op.Allowed || op.Results[1].Remaining != 100 {
		t.Fatalf("an Op after Take drained the bucket: %+v; want denied with the quota untouched", op.Results)
	}
	do(t, s, &tollgate.Op{Kind: tollgate.OpTake, Key: "k", Rules: rules, Cost: 2})
	if r := take2(t, s, "k", lim, 1); r.Allowed {
		t.Fatalf("Take after the Op emptied the bucket: %+v", r)
	}
}

// TestRulesNeverMeetTenantKeys: a tenant key made of the very bytes that
// another tenant's rule is stored under (the key, the rule's name and a
// length byte) still has a bucket of its own, and so does the rule.
func TestRulesNeverMeetTenantKeys(t *testing.T) {
	s := memory.New(memory.WithSweepInterval(0))
	defer s.Close()
	lim := tollgate.Limit{Rate: 1, Burst: 3}
	rules := []tollgate.Rule{{Sub: "b:x", Limit: lim}}
	twin := "acme" + "b:x" + "\x03"
	if op := do(t, s, &tollgate.Op{Kind: tollgate.OpTake, Key: "acme", Rules: rules, Cost: 3}); !op.Allowed {
		t.Fatalf("first take of the rule: %+v", op.Results)
	}
	if r := take2(t, s, twin, lim, 3); !r.Allowed {
		t.Fatalf("tenant %q found the rule's state: %+v", twin, r)
	}
	if op := do(t, s, &tollgate.Op{Kind: tollgate.OpInspect, Key: "acme", Rules: rules, Cost: 1}); op.Results[0].Remaining != 0 {
		t.Fatalf("the rule lost its state to tenant %q: %+v", twin, op.Results)
	}
}

// TestQuotaStateEndsWithItsPeriod: the sweeper drops a quota's state once
// its period (and the linger after it) is over, not before.
func TestQuotaStateEndsWithItsPeriod(t *testing.T) {
	clock := storetest.NewClockAt(time.Date(2026, 3, 10, 18, 0, 0, 0, time.UTC))
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0))
	defer s.Close()
	rules := []tollgate.Rule{{Sub: "day", Quota: tollgate.PerDay(10)}}
	do(t, s, &tollgate.Op{Kind: tollgate.OpTake, Key: "k", Rules: rules, Cost: 4})
	if n := s.Stats().Keys; n != 1 {
		t.Fatalf("%d keys tracked, want the quota's 1", n)
	}
	clock.Set(time.Date(2026, 3, 11, 0, 0, 0, 0, time.UTC).Add(memory.QuotaLinger - time.Microsecond))
	if n := s.Sweep(); n != 0 {
		t.Fatalf("a sweep before the period and its linger ended dropped %d", n)
	}
	clock.Advance(time.Microsecond)
	if n := s.Sweep(); n != 1 || s.Stats().Keys != 0 {
		t.Fatalf("a sweep after the period dropped %d, %d keys left; want 1 and 0", n, s.Stats().Keys)
	}
}

// TestQuotaSurvivesSweepsWithinItsPeriod: a quota's word is a count, not a
// time; a sweep in the middle of its period keeps it.
func TestQuotaSurvivesSweepsWithinItsPeriod(t *testing.T) {
	clock := storetest.NewClockAt(time.Date(2026, 3, 10, 1, 0, 0, 0, time.UTC))
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0))
	defer s.Close()
	rules := []tollgate.Rule{{Limit: tollgate.Limit{Rate: 1000, Burst: 10}}, {Sub: "day", Quota: tollgate.PerDay(10)}}
	do(t, s, &tollgate.Op{Kind: tollgate.OpTake, Key: "k", Rules: rules, Cost: 9})
	clock.Advance(20 * time.Hour)
	if n := s.Sweep(); n != 1 {
		t.Fatalf("the sweep dropped %d; want the full bucket alone", n)
	}
	op := do(t, s, &tollgate.Op{Kind: tollgate.OpTake, Key: "k", Rules: rules, Cost: 2})
	if op.Allowed || op.Results[1].Remaining != 1 {
		t.Fatalf("after a sweep: %+v; want the quota's 1 token left and a denial", op.Results)
	}
}

// TestFloodKeepsExhaustedQuotas: at the key cap, a flood of new tenants
// with quotas evicts their fresh states, not the quota a tenant has used
// up, nor the bucket it has drained.
func TestFloodKeepsExhaustedQuotas(t *testing.T) {
	clock := storetest.NewClockAt(time.Date(2026, 3, 10, 9, 0, 0, 0, time.UTC))
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0), memory.WithMaxKeys(64))
	defer s.Close()
	slow := tollgate.Limit{Rate: 1.0 / 60, Burst: 10} // a minute a token: nothing is full again during the test
	rules := []tollgate.Rule{{Limit: slow}, {Sub: "day", Quota: tollgate.PerDay(20)}}
	do(t, s, &tollgate.Op{Kind: tollgate.OpTake, Key: "exhausted", Rules: rules[1:], Cost: 20})
	do(t, s, &tollgate.Op{Kind: tollgate.OpTake, Key: "drained", Rules: rules, Cost: 10})
	for i := range 5000 {
		key := "flood-" + string(rune('a'+i%26)) + time.Duration(i).String()
		do(t, s, &tollgate.Op{Kind: tollgate.OpTake, Key: key, Rules: rules, Cost: 1})
		clock.Advance(time.Millisecond)
	}
	if n := s.Stats().Keys; n > 64 {
		t.Fatalf("%d keys tracked, over the cap of 64", n)
	}
	if op := do(t, s, &tollgate.Op{Kind: tollgate.OpTake, Key: "exhausted", Rules: rules[1:], Cost: 1}); op.Allowed {
		t.Fatalf("the exhausted quota was evicted: %+v", op.Results)
	}
	if op := do(t, s, &tollgate.Op{Kind: tollgate.OpInspect, Key: "drained", Rules: rules, Cost: 1}); op.Results[0].Remaining != 0 || op.Results[1].Remaining != 10 {
		t.Fatalf("the drained tenant's states were evicted: %+v", op.Results)
	}
	if st := s.Stats(); st.Evictions == 0 || st.DrainedEvictions != 0 {
		t.Fatalf("stats %+v: want evictions, none of a drained state", st)
	}
}

// TestOpsRaceLockFreeTakes: Ops on a bucket and a quota, and Takes of the
// same bucket alone, which take no lock, from 64 goroutines on a stopped
// clock: exactly the burst is allowed in all, and the quota counts exactly
// the Ops allowed.
func TestOpsRaceLockFreeTakes(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0))
	defer s.Close()
	lim := tollgate.Limit{Rate: 10, Burst: 500}
	rules := []tollgate.Rule{{Limit: lim}, {Sub: "day", Quota: tollgate.PerDay(1_000_000)}}
	var takes, ops atomic.Int64
	var wg sync.WaitGroup
	for w := range 64 {
		wg.Go(func() {
			ctx := context.Background()
			for range 20 {
				if w%2 == 0 {
					if r, err := s.Take(ctx, "k", lim, 1); err == nil && r.Allowed {
						takes.Add(1)
					}
					continue
				}
				op := &tollgate.Op{Kind: tollgate.OpTake, Key: "k", Rules: rules, Cost: 1}
				if err := s.Do(ctx, op); err == nil && op.Allowed {
					ops.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got := takes.Load() + ops.Load(); got != lim.Burst {
		t.Fatalf("%d Takes and %d Ops allowed, %d in all; want the burst of %d", takes.Load(), ops.Load(), got, lim.Burst)
	}
	op := do(t, s, &tollgate.Op{Kind: tollgate.OpInspect, Key: "k", Rules: rules, Cost: 1})
	if used := 1_000_000 - op.Results[1].Remaining; used != ops.Load() {
		t.Fatalf("the quota counts %d; %d Ops were allowed", used, ops.Load())
	}
}

// TestDoDecidesAtOpNow: a Store on the monotonic clock decides an Op at
// its Now, as TakeAt does, whichever path the Op takes.
func TestDoDecidesAtOpNow(t *testing.T) {
	s := memory.New(memory.WithSweepInterval(0))
	defer s.Close()
	lim := tollgate.Limit{Rate: 1, Burst: 2}
	now := time.Now()
	for _, rules := range [][]tollgate.Rule{
		{{Limit: lim}},
		{{Limit: lim}, {Sub: "day", Quota: tollgate.PerDay(100)}},
	} {
		key := "k" + string(rune('0'+len(rules)))
		if op := do(t, s, &tollgate.Op{Kind: tollgate.OpTake, Key: key, Rules: rules, Cost: 2, Now: now}); !op.Allowed {
			t.Fatalf("%d rules: first take denied: %+v", len(rules), op.Results)
		}
		if op := do(t, s, &tollgate.Op{Kind: tollgate.OpTake, Key: key, Rules: rules, Cost: 1, Now: now.Add(999 * time.Millisecond)}); op.Allowed {
			t.Fatalf("%d rules: a take 999ms later was allowed: %+v", len(rules), op.Results)
		}
		if op := do(t, s, &tollgate.Op{Kind: tollgate.OpTake, Key: key, Rules: rules, Cost: 1, Now: now.Add(time.Second)}); !op.Allowed {
			t.Fatalf("%d rules: a take a second later, when a token is back, was denied: %+v", len(rules), op.Results)
		}
	}
}

// TestDoAllocatesNothing: Do allocates nothing for a tenant it tracks,
// whatever the Op, given Results and Marks with room for its rules, as
// the Limiter gives.
func TestDoAllocatesNothing(t *testing.T) {
	s := memory.New(memory.WithSweepInterval(0))
	defer s.Close()
	ctx := context.Background()
	lim := tollgate.Limit{Rate: 100, Burst: 1e9}
	quota := tollgate.Rule{Sub: "day", Quota: tollgate.PerDay(1e12)}
	budget := tollgate.Rule{Sub: "b:reports", Limit: lim}
	long := string(make([]byte, 100))
	ops := []tollgate.Op{
		{Kind: tollgate.OpTake, Key: "tenant-1", Rules: []tollgate.Rule{{Limit: lim}}},
		{Kind: tollgate.OpTake, Key: "tenant-1", Rules: []tollgate.Rule{{Limit: lim}}, MaxDelay: time.Second},
		{Kind: tollgate.OpTake, Key: "tenant-1", Rules: []tollgate.Rule{{Limit: lim}, quota}},
		{Kind: tollgate.OpTake, Key: "tenant-1", Rules: []tollgate.Rule{{Limit: lim}, budget, quota}, MaxDelay: time.Second},
		{Kind: tollgate.OpInspect, Key: "tenant-1", Rules: []tollgate.Rule{{Limit: lim}, budget, quota}},
		{Kind: tollgate.OpTake, Key: long, Rules: []tollgate.Rule{{Limit: lim}, budget, quota}},
	}
	for i := range ops {
		ops[i].Cost = 1
		ops[i].Results = make([]tollgate.Result, 0, 4)
		ops[i].Marks = make([]int64, 0, 4)
		do(t, s, &ops[i])
	}
	n := adaptertest.AllocsPerRun(t, 1000, func() {
		for i := range ops {
			ops[i].Now = time.Now()
			s.Do(ctx, &ops[i])
		}
	})
	if n != 0 {
		t.Fatalf("%v allocations for %d Ops of a tracked tenant", n, len(ops))
	}
}
