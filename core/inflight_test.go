package tollgate_test

import (
	"context"
	"sync"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/core/storekit"
	"github.com/tollgate-go/tollgate/core/storetest"
)

// slow is a plan whose tenants may have two requests in flight.
var slow = tollgate.Plan{Name: "slow", Limit: tollgate.Limit{Rate: 100, Burst: 100},
	Policies: []tollgate.Policy{{InFlight: 2}}}

func TestInFlightSlots(t *testing.T) {
	l, clock := newModelLimiter(t, tollgate.SinglePlan(slow))
	ctx := context.Background()
	var held []tollgate.Decision
	for range 2 {
		d, err := l.Take(ctx, tollgate.Request{Tenant: "t", Cost: 5})
		if err != nil || !d.Allowed {
			t.Fatalf("a slot of two: %+v, %v", d, err)
		}
		held = append(held, d)
	}
	d, _ := l.Take(ctx, tollgate.Request{Tenant: "t"})
	if d.Allowed || d.Policy != "slow-inflight" || d.PolicyKind() != "in-flight" || d.RetryAfter != time.Second || d.Remaining != 0 {
		t.Fatalf("a third request in flight: %+v (%s), want a denial by slow-inflight after an estimate of 1s", d, d.PolicyKind())
	}
	if d.Results()[0].Remaining != 90 {
		t.Fatalf("the denied request spent tokens: %+v", d.Results())
	}
	if n := l.SlotsHeld()["slow"]; n != 2 {
		t.Fatalf("%d slots held, want 2", n)
	}
	if err := l.Release(ctx, &held[0]); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, &held[0]); err != nil {
		t.Fatal("a second Release must do nothing:", err)
	}
	if d, _ = l.Take(ctx, tollgate.Request{Tenant: "t"}); !d.Allowed {
		t.Fatalf("after a release: %+v", d)
	}
	// Another tenant's slots are its own; a reset keeps the slots of
	// requests that still run.
	if d, _ := l.Take(ctx, tollgate.Request{Tenant: "u"}); !d.Allowed {
		t.Fatalf("another tenant: %+v", d)
	}
	l.Reset(ctx, "t")
	if d, _ := l.Take(ctx, tollgate.Request{Tenant: "t"}); d.Allowed {
		t.Fatal("a reset freed the slots of running requests")
	}
	// A slot that nobody renews frees itself: the lease expires.
	clock.Advance(11 * time.Second)
	if d, _ := l.Take(ctx, tollgate.Request{Tenant: "t"}); !d.Allowed {
		t.Fatalf("slots past their lease: %+v", d)
	}
}

// TestWaitForASlot: Wait waits for a slot in order of arrival, and gets one
// as soon as a request of its tenant releases one here.
func TestWaitForASlot(t *testing.T) {
	clock := storetest.NewClock()
	l, err := tollgate.New(storetest.NewModelStore(clock.Now), tollgate.SinglePlan(slow), tollgate.WithLogger(nil), tollgate.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var running []tollgate.Decision
	for range 2 {
		d, _ := l.Take(ctx, tollgate.Request{Tenant: "t"})
		running = append(running, d)
	}
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := l.Wait(ctx, tollgate.Request{Tenant: "t"})
			if err != nil || !d.Allowed {
				t.Errorf("waiter %d: %+v, %v", i, d, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			l.Release(ctx, &d)
		}()
		time.Sleep(20 * time.Millisecond) // arrive in order
	}
	start := time.Now()
	l.Release(ctx, &running[0])
	l.Release(ctx, &running[1])
	wg.Wait()
	if took := time.Since(start); took > time.Second {
		t.Errorf("the waiters took %v after the slots came free", took)
	}
	if len(order) != 3 || order[0] > order[2] {
		t.Errorf("slots went to waiters in the order %v", order)
	}
	// A waiter whose context ends leaves the line, having spent nothing.
	d1, _ := l.Take(ctx, tollgate.Request{Tenant: "u"})
	d2, _ := l.Take(ctx, tollgate.Request{Tenant: "u"})
	short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	if _, err := l.Wait(short, tollgate.Request{Tenant: "u", Cost: 10}); err == nil {
		t.Fatal("Wait got a slot that nobody released")
	}
	l.Release(ctx, &d1)
	if d, _ := l.Take(ctx, tollgate.Request{Tenant: "u"}); !d.Allowed || d.Results()[0].Remaining != 97 {
		t.Fatalf("after a waiter gave up: %+v", d.Results())
	}
	l.Release(ctx, &d2)
}

// kindCounter counts the Ops of each kind that reach its store.
type kindCounter struct {
	tollgate.Store
	mu    sync.Mutex
	kinds map[storekit.Kind]int
}

func (k *kindCounter) Do(ctx context.Context, op *storekit.Op) error {
	k.mu.Lock()
	k.kinds[op.Kind]++
	k.mu.Unlock()
	return k.Store.Do(ctx, op)
}

func (k *kindCounter) count(kind storekit.Kind) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.kinds[kind]
}

// TestFallbackSlotsStayInTheFallback: a slot granted by the fallback store
// while the main one fails is renewed and released there, not in the
// failing store, where its lease does not exist.
func TestFallbackSlotsStayInTheFallback(t *testing.T) {
	clock := storetest.NewClock()
	main := &failingStore{}
	fallback := &kindCounter{Store: newStore(clock), kinds: map[storekit.Kind]int{}}
	l, err := tollgate.New(main, tollgate.SinglePlan(slow), tollgate.WithClock(clock.Now), tollgate.WithLogger(nil),
		tollgate.WithFallback(fallback, 1))
	if err != nil {
		t.Fatal(err)
	}
	tollgate.SetLeaseRenewal(l, time.Millisecond)
	ctx := context.Background()
	d, err := l.Take(ctx, tollgate.Request{Tenant: "t"})
	if err != nil || !d.Allowed || !d.Fallback {
		t.Fatalf("%+v, %v: want a slot from the fallback store", d, err)
	}
	failedBefore := main.calls.Load()
	deadline := time.Now().Add(10 * time.Second)
	for fallback.count(storekit.Renew) < 3 {
		if time.Now().After(deadline) {
			t.Fatal("the fallback store's lease was never renewed")
		}
		time.Sleep(time.Millisecond)
	}
	if err := l.Release(ctx, &d); err != nil {
		t.Fatal(err)
	}
	if n := fallback.count(storekit.Release); n != 1 {
		t.Fatalf("%d releases reached the fallback store, want 1", n)
	}
	if n := main.calls.Load() - failedBefore; n != 0 {
		t.Fatalf("%d renewals or releases of the fallback's slot went to the failing store", n)
	}
}

// TestInFlightInProcess: of an in-process store, slots are held without a
// lease; SlotsHeld counts them by plan, and a Decision and its copy
// released both give back one slot.
func TestInFlightInProcess(t *testing.T) {
	s := memory.New()
	defer s.Close()
	l, err := tollgate.New(s, tollgate.SinglePlan(slow), tollgate.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, _ := l.Take(ctx, tollgate.Request{Tenant: "t"})
	b, _ := l.Take(ctx, tollgate.Request{Tenant: "t"})
	if !a.Allowed || !b.Allowed || l.SlotsHeld()["slow"] != 2 {
		t.Fatalf("two slots of two: %v, %v, %v held", a.Allowed, b.Allowed, l.SlotsHeld())
	}
	copyOfA := a
	for _, d := range []*tollgate.Decision{&a, &copyOfA, &a} {
		if err := l.Release(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if n := l.SlotsHeld()["slow"]; n != 1 {
		t.Fatalf("%d slots held after releasing one Decision and its copy, want 1", n)
	}
	c, _ := l.Take(ctx, tollgate.Request{Tenant: "t"})
	if d, _ := l.Take(ctx, tollgate.Request{Tenant: "t"}); !c.Allowed || d.Allowed {
		t.Fatalf("after one release: %v then %v, want one slot free", c.Allowed, d.Allowed)
	}
	for _, d := range []*tollgate.Decision{&b, &c} {
		if err := l.Release(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if held := l.SlotsHeld(); len(held) != 0 {
		t.Fatalf("slots held after every release: %v", held)
	}
}
