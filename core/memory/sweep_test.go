package memory_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/core/storekit"
	"github.com/tollgate-go/tollgate/core/storetest"
)

func TestSweepDropsOnlyIdleTenants(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0))
	for i := range 1000 {
		take(t, s, fmt.Sprint("idle-", i), limit, 1) // full again after 100ms
	}
	take(t, s, "busy", limit, 10) // full again after 1s
	clock.Advance(500 * time.Millisecond)
	if n := s.Sweep(); n != 1000 {
		t.Fatalf("Sweep dropped %d tenants, want the 1000 idle ones", n)
	}
	if st := s.Stats(); st.Tenants != 1 || st.Evictions != 0 {
		t.Fatalf("after the sweep %+v, want 1 tenant and no evictions", st)
	}
	// The busy tenant kept its state; a swept one is the full bucket it was.
	if r := take(t, s, "busy", limit, 6); r.Allowed || r.Remaining != 5 {
		t.Fatalf("busy bucket after the sweep: %+v, want 5 tokens left", r)
	}
	if r := take(t, s, "idle-7", limit, 10); !r.Allowed {
		t.Fatalf("swept bucket is not full: %+v", r)
	}
}

// TestSweepKeepsEveryRuleInUse: a tenant whose main bucket is full but
// whose quota or budget is in use is kept until those are idle too: a
// quota until its period ends, a budget's bucket until it is full.
func TestSweepKeepsEveryRuleInUse(t *testing.T) {
	clock := storetest.NewClockAt(time.Date(2026, 3, 10, 9, 0, 0, 0, time.UTC))
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0))
	fast := tollgate.Limit{Rate: 1000, Burst: 10}
	withQuota := []storekit.Rule{bucket("", fast), quota("day", 10)}
	withBudget := []storekit.Rule{bucket("", fast), bucket("b:x", tollgate.Limit{Rate: 1, Burst: 10})}
	do(t, s, &storekit.Op{Kind: storekit.Take, Tenant: "quota", Rules: withQuota, Cost: 9})
	do(t, s, &storekit.Op{Kind: storekit.Take, Tenant: "budget", Rules: withBudget, Cost: 9})
	clock.Advance(time.Second)
	if n := s.Sweep(); n != 0 {
		t.Fatalf("the sweep dropped %d tenants whose rules are in use", n)
	}
	if op := do(t, s, &storekit.Op{Kind: storekit.Take, Tenant: "quota", Rules: withQuota, Cost: 2}); op.Allowed || op.Results[1].Remaining != 1 {
		t.Fatalf("after a sweep: %+v, want the quota's 1 token left and a denial", op.Results)
	}
	clock.Advance(9 * time.Second) // the budget is full again
	if n := s.Sweep(); n != 1 {
		t.Fatalf("the sweep dropped %d tenants, want the one whose budget is full", n)
	}
	clock.Set(time.Date(2026, 3, 11, 0, 0, 0, 0, time.UTC)) // a new day
	if n := s.Sweep(); n != 1 {
		t.Fatalf("the sweep dropped %d tenants, want the one whose quota period ended", n)
	}
	if st := s.Stats(); st.Tenants != 0 {
		t.Fatalf("%+v, want no tenant left", st)
	}
}

// eventually waits for cond, which a background goroutine makes true.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within 5s", what)
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
}

func closed(c <-chan struct{}) func() bool {
	return func() bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
}

// TestSweeperRunsAndStops: the background sweeper drops idle tenants on
// its own, on the Store's clock; Close stops it, and so does the Store
// becoming unreachable. The Store works on after Close.
func TestSweeperRunsAndStops(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(time.Millisecond))
	take(t, s, "k", limit, 1)
	if s.Stats().Tenants != 1 {
		t.Fatal(s.Stats())
	}
	clock.Advance(time.Second)
	eventually(t, "the sweep of the idle tenant", func() bool { return s.Stats().Tenants == 0 })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s.Close() // twice is fine
	eventually(t, "the sweeper's end after Close", closed(memory.SweeperDone(s)))
	if r := take(t, s, "k", limit, 1); !r.Allowed {
		t.Fatal(r)
	}

	done := func() <-chan struct{} {
		s := memory.New(memory.WithSweepInterval(time.Hour))
		take(t, s, "k", limit, 1)
		return memory.SweeperDone(s)
	}()
	eventually(t, "the sweeper's end once its Store is unreachable", closed(done))
}
