package memory_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/core/storekit"
	"github.com/tollgate-go/tollgate/core/storetest"
)

func inFlight(name string, burst int64) storekit.Rule {
	return storekit.Rule{Kind: storekit.InFlight, Name: name, Burst: burst}
}

// takeSlot takes a slot of tenant's cap under lease, for 10 s, and
// reports whether it was granted.
func takeSlot(t *testing.T, s *memory.Store, tenant, lease string, rules ...storekit.Rule) bool {
	t.Helper()
	return do(t, s, &storekit.Op{Kind: storekit.Take, Tenant: tenant, Rules: rules, Cost: 1, Lease: lease, LeaseTTL: 10 * time.Second}).Allowed
}

// TestSweepKeepsTenantsInFlight: a tenant whose buckets are full but that
// holds a slot is kept while the slot's lease lives, and swept once it has
// expired or been released.
func TestSweepKeepsTenantsInFlight(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0))
	defer s.Close()
	c := inFlight("inflight", 1)
	rules := []storekit.Rule{bucket("", limit), c}
	takeSlot(t, s, "expires", "a", rules...)
	takeSlot(t, s, "released", "b", rules...)
	clock.Advance(9 * time.Second) // the buckets are full again
	if n := s.Sweep(); n != 0 {
		t.Fatalf("the sweep dropped %d tenants that hold slots", n)
	}
	if takeSlot(t, s, "expires", "c", rules...) {
		t.Fatal("a sweep freed a live slot")
	}
	do(t, s, &storekit.Op{Kind: storekit.Release, Tenant: "released", Rules: []storekit.Rule{c}, Lease: "b"})
	if n := s.Sweep(); n != 1 {
		t.Fatalf("the sweep dropped %d tenants, want the one whose slot was released", n)
	}
	clock.Advance(time.Second)
	if n := s.Sweep(); n != 1 || s.Stats().Tenants != 0 {
		t.Fatalf("the sweep dropped %d tenants (%d left), want the one whose lease expired", n, s.Stats().Tenants)
	}
}

// TestFloodKeepsTenantsInFlight: a flood of new tenants at the cap evicts
// neither a tenant with a request in flight nor its slot.
func TestFloodKeepsTenantsInFlight(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0), memory.WithMaxKeys(1000))
	defer s.Close()
	c := inFlight("inflight", 100) // one slot of a hundred: little of it spent
	takeSlot(t, s, "tenant", "a", c)
	for i := range 5000 {
		take(t, s, fmt.Sprint("fake-", i), limit, 1)
		clock.Advance(time.Microsecond)
	}
	if st := s.Stats(); st.Evictions == 0 {
		t.Fatalf("no eviction after a flood: %+v", st)
	}
	op := do(t, s, &storekit.Op{Kind: storekit.Inspect, Tenant: "tenant", Rules: []storekit.Rule{c}})
	if op.Results[0].Remaining != 99 {
		t.Fatalf("after the flood the tenant has %d slots free, want 99: its request in flight was forgotten", op.Results[0].Remaining)
	}
}

// TestLeasesAreBounded: a cap holds at most its burst of leases, however
// many requests ask, and the leases of requests that never release expire:
// a tenant's memory is bounded by its caps.
func TestLeasesAreBounded(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0))
	defer s.Close()
	c := inFlight("inflight", 3)
	granted := 0
	for i := range 10_000 {
		if takeSlot(t, s, "t", fmt.Sprint(i), c) {
			granted++
		}
		if i%1000 == 999 {
			clock.Advance(5 * time.Second) // some leases expire
		}
	}
	// Three slots every 10 s, for 50 s.
	if granted != 15 {
		t.Fatalf("%d of 10,000 requests granted in 50s with 3 slots of 10s leases, want 15", granted)
	}
	clock.Advance(10 * time.Second)
	if n := s.Sweep(); n != 1 {
		t.Fatalf("the sweep dropped %d tenants once every lease expired, want 1", n)
	}
}

// TestReleaseThroughAStaleSlot: the Slot a Take sets lets its Release find
// the tenant, and a Slot whose tenant was dropped since, or that names
// another tenant, is not trusted: the Release looks the tenant up.
func TestReleaseThroughAStaleSlot(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0))
	defer s.Close()
	c := inFlight("inflight", 2)
	first := do(t, s, &storekit.Op{Kind: storekit.Take, Tenant: "t", Rules: []storekit.Rule{c}, Cost: 1, Lease: "a", LeaseTTL: 10 * time.Second})
	if !first.Allowed || first.Slot == nil {
		t.Fatalf("the first Take: allowed %v, Slot %v; want a Slot", first.Allowed, first.Slot)
	}
	stale := first.Slot
	// Released through its Slot, the tenant is idle and swept.
	do(t, s, &storekit.Op{Kind: storekit.Release, Tenant: "t", Rules: []storekit.Rule{c}, Lease: "a", Slot: stale})
	if n := s.Sweep(); n != 1 {
		t.Fatalf("the sweep dropped %d tenants after the release, want 1", n)
	}
	// A new tenant "t" holds two slots; a Release with the dropped
	// tenant's Slot, or with another tenant's, still frees one.
	takeSlot(t, s, "t", "b", c)
	takeSlot(t, s, "t", "c", c)
	do(t, s, &storekit.Op{Kind: storekit.Release, Tenant: "t", Rules: []storekit.Rule{c}, Lease: "b", Slot: stale})
	other := do(t, s, &storekit.Op{Kind: storekit.Take, Tenant: "u", Rules: []storekit.Rule{c}, Cost: 1, Lease: "d", LeaseTTL: 10 * time.Second})
	do(t, s, &storekit.Op{Kind: storekit.Release, Tenant: "t", Rules: []storekit.Rule{c}, Lease: "c", Slot: other.Slot})
	if r := do(t, s, &storekit.Op{Kind: storekit.Inspect, Tenant: "t", Rules: []storekit.Rule{c}}).Results[0]; r.Remaining != 2 {
		t.Fatalf("tenant t has %d slots free, want 2: a Release through a stale Slot was lost", r.Remaining)
	}
	if r := do(t, s, &storekit.Op{Kind: storekit.Inspect, Tenant: "u", Rules: []storekit.Rule{c}}).Results[0]; r.Remaining != 1 {
		t.Fatalf("tenant u has %d slots free, want 1: a Release of another tenant freed its slot", r.Remaining)
	}
}

// TestSlotsWithoutLeases: a Take with no lease, as a Limiter makes of an
// in-process store, holds its slots until its Held gives them back,
// on the path of a bucket and caps alone and on the general one; they
// never expire, a Reset keeps them, a Cancel leaves them, and a sweep
// keeps their tenant. Two caps count apart.
func TestSlotsWithoutLeases(t *testing.T) {
	clock := storetest.NewClock()
	s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0))
	defer s.Close()
	c := inFlight("inflight", 2)
	day := storekit.Rule{Kind: storekit.Quota, Name: "day", Burst: 100, Period: func(t time.Time) (time.Time, time.Time) {
		start := t.Truncate(24 * time.Hour)
		return start, start.Add(24 * time.Hour)
	}}
	budget := inFlight("b:x:inflight", 2)
	for i, rules := range [][]storekit.Rule{{bucket("", limit), c}, {bucket("", limit), day, c}, {bucket("", limit), c, budget}, {bucket("", limit), day, c, budget}} {
		tenant := fmt.Sprint("tenant-", i)
		take := func() *storekit.Op {
			return do(t, s, &storekit.Op{Kind: storekit.Take, Tenant: tenant, Rules: rules, Cost: 1, MaxDelay: time.Second})
		}
		var held []storekit.Held
		for range 2 {
			op := take()
			h, ok := op.Slot.(storekit.Held)
			if !op.Allowed || !ok {
				t.Fatalf("%d rules: a Take without a lease: allowed %v, Slot %T; want a Held", len(rules), op.Allowed, op.Slot)
			}
			held = append(held, h)
		}
		clock.Advance(time.Hour)
		do(t, s, &storekit.Op{Kind: storekit.Reset, Tenant: tenant, Rules: rules})
		if n := s.Sweep(); n != 0 {
			t.Fatalf("the sweep dropped %d tenants that hold slots", n)
		}
		if op := take(); op.Allowed || op.Results[len(rules)-1].Remaining != 0 {
			t.Fatalf("%d rules: a third request an hour later, after a reset: %+v; want the cap full", len(rules), op.Results)
		}
		held[0].Release()
		op := take()
		if !op.Allowed || op.Results[len(rules)-1].Remaining != 0 {
			t.Fatalf("%d rules: after one release: %+v; want its slot taken again", len(rules), op.Results)
		}
		// A Cancel without a lease gives back tokens alone.
		cancel := &storekit.Op{Kind: storekit.Cancel, Tenant: tenant, Rules: rules, Cost: 1, Mark: op.Mark + 1}
		do(t, s, cancel)
		if op := take(); op.Allowed {
			t.Fatalf("%d rules: a Cancel without a lease freed a slot: %+v", len(rules), op.Results)
		}
		for _, h := range append(held[1:], op.Slot.(storekit.Held)) {
			h.Release()
		}
		if op := do(t, s, &storekit.Op{Kind: storekit.Inspect, Tenant: tenant, Rules: rules}); op.Results[len(rules)-1].Remaining != 2 {
			t.Fatalf("%d rules: after every release: %+v; want the cap empty", len(rules), op.Results)
		}
		clock.Advance(25 * time.Hour) // the bucket full, the quota's day over
		if n := s.Sweep(); n != 1 {
			t.Fatalf("%d rules: the sweep dropped %d tenants, want the one whose slots were all released", len(rules), n)
		}
	}
}
