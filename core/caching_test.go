package tollgate_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/storetest"
)

var (
	freePlan, startupPlan, growthPlan, enterprisePlan = plan(0), plan(1), plan(2), plan(3)
)

func plan(i int) tollgate.Plan { return tollgate.DefaultPlans()[i] }

// planDB stands in for the application's database of plans.
type planDB struct {
	mu      sync.Mutex
	plans   map[string]tollgate.Plan
	lookups atomic.Int64
	fail    atomic.Bool
	gate    chan struct{} // when set, lookups wait for it
}

func (db *planDB) ResolvePlan(ctx context.Context, tenant string) (tollgate.Plan, error) {
	db.lookups.Add(1)
	if db.gate != nil {
		select {
		case <-db.gate:
		case <-ctx.Done():
			return tollgate.Plan{}, ctx.Err()
		}
	}
	if db.fail.Load() {
		return tollgate.Plan{}, errors.New("database unavailable")
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	if p, ok := db.plans[tenant]; ok {
		return p, nil
	}
	return freePlan, nil
}

func (db *planDB) set(tenant string, p tollgate.Plan) {
	db.mu.Lock()
	db.plans[tenant] = p
	db.mu.Unlock()
}

func newCache(t *testing.T, db *planDB, maxEntries int) (*tollgate.CachingResolver, *storetest.Clock) {
	t.Helper()
	clock := storetest.NewClock()
	c, err := tollgate.NewCachingResolver(db, time.Minute, maxEntries)
	if err != nil {
		t.Fatal(err)
	}
	tollgate.WithCacheClock(c, clock.Now)
	return c, clock
}

func TestCachingResolverTTLAndInvalidate(t *testing.T) {
	db := &planDB{plans: map[string]tollgate.Plan{"acme": startupPlan}}
	c, clock := newCache(t, db, 0)
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		if p, err := c.ResolvePlan(ctx, "acme"); err != nil || p.Name != startupPlan.Name {
			t.Fatalf("ResolvePlan = %v, %v", p, err)
		}
	}
	if n := db.lookups.Load(); n != 1 {
		t.Fatalf("%d lookups within the TTL, want 1", n)
	}
	db.set("acme", enterprisePlan)
	clock.Advance(59 * time.Second)
	if p, _ := c.ResolvePlan(ctx, "acme"); p.Name != startupPlan.Name {
		t.Fatalf("within the TTL the cached plan should hold, got %v", p.Name)
	}
	clock.Advance(time.Second)
	// Past the TTL the cached plan is served while a lookup refreshes it.
	if p, _ := c.ResolvePlan(ctx, "acme"); p.Name != startupPlan.Name {
		t.Fatalf("the first request after the TTL got %v, want the cached startup", p.Name)
	}
	waitFor(t, func() bool { p, _ := c.ResolvePlan(ctx, "acme"); return p.Name == enterprisePlan.Name })
	if n := db.lookups.Load(); n != 2 {
		t.Fatalf("%d lookups after one TTL, want 2", n)
	}
	// Invalidate: the change applies on the very next request.
	db.set("acme", growthPlan)
	c.Invalidate("acme")
	if p, _ := c.ResolvePlan(ctx, "acme"); p.Name != growthPlan.Name {
		t.Fatalf("after Invalidate got %v, want growth", p.Name)
	}
}

func TestCachingResolverSingleFlight(t *testing.T) {
	db := &planDB{plans: map[string]tollgate.Plan{}, gate: make(chan struct{})}
	c, _ := newCache(t, db, 0)
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.ResolvePlan(context.Background(), "acme"); err != nil {
				errs <- err
			}
		}()
	}
	// Let the 50 callers pile up on the one lookup before it answers.
	for db.lookups.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	close(db.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := db.lookups.Load(); n != 1 {
		t.Fatalf("%d lookups for 50 concurrent misses, want 1", n)
	}
}

func TestCachingResolverWaiterCancellation(t *testing.T) {
	db := &planDB{plans: map[string]tollgate.Plan{}, gate: make(chan struct{})}
	defer close(db.gate)
	c, _ := newCache(t, db, 0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.ResolvePlan(ctx, "acme"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter got %v", err)
	}
}

func TestCachingResolverInvalidateDuringLookup(t *testing.T) {
	db := &planDB{plans: map[string]tollgate.Plan{"acme": startupPlan}, gate: make(chan struct{})}
	c, _ := newCache(t, db, 0)
	done := make(chan tollgate.Plan)
	go func() {
		p, _ := c.ResolvePlan(context.Background(), "acme")
		done <- p
	}()
	for db.lookups.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	// The plan changes while the old lookup is under way.
	c.Invalidate("acme")
	db.set("acme", enterprisePlan)
	close(db.gate)
	<-done
	if p, _ := c.ResolvePlan(context.Background(), "acme"); p.Name != enterprisePlan.Name {
		t.Fatalf("an answer from before Invalidate was cached: %v", p.Name)
	}
}

func TestCachingResolverStaleOnError(t *testing.T) {
	db := &planDB{plans: map[string]tollgate.Plan{"acme": growthPlan}}
	c, clock := newCache(t, db, 0)
	ctx := context.Background()
	c.ResolvePlan(ctx, "acme")
	db.fail.Store(true)
	clock.Advance(90 * time.Second) // expired, within one more TTL
	if p, err := c.ResolvePlan(ctx, "acme"); err != nil || p.Name != growthPlan.Name {
		t.Fatalf("with the database down the last plan should serve: %v, %v", p, err)
	}
	clock.Advance(31 * time.Second)
	if _, err := c.ResolvePlan(ctx, "acme"); err == nil {
		t.Fatal("two TTLs after the last success the error must surface")
	}
	if _, err := c.ResolvePlan(ctx, "never-seen"); err == nil {
		t.Fatal("an unknown tenant with the database down must be an error")
	}
}

func TestCachingResolverIsBounded(t *testing.T) {
	db := &planDB{plans: map[string]tollgate.Plan{}}
	c, clock := newCache(t, db, 10)
	for i := 0; i < 100; i++ {
		clock.Advance(time.Millisecond)
		if _, err := c.ResolvePlan(context.Background(), fmt.Sprint("tenant-", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.Len(); n > 10 {
		t.Fatalf("cache holds %d tenants, bound is 10", n)
	}
}

func TestCachingResolverRejectsInvalidPlans(t *testing.T) {
	bad := tollgate.PlanResolverFunc(func(context.Context, string) (tollgate.Plan, error) {
		return tollgate.Plan{Name: "broken", Limit: tollgate.Limit{Rate: 0, Burst: 5}}, nil
	})
	c, err := tollgate.NewCachingResolver(bad, time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ResolvePlan(context.Background(), "x"); !errors.Is(err, tollgate.ErrInvalidLimit) {
		t.Fatalf("invalid plan from the database: %v", err)
	}
	for name, build := range map[string]func() error{
		"nil":      func() error { _, err := tollgate.NewCachingResolver(nil, time.Minute, 0); return err },
		"zero ttl": func() error { _, err := tollgate.NewCachingResolver(bad, 0, 0); return err },
		"entries": func() error {
			_, err := tollgate.NewCachingResolver(bad, time.Minute, -1)
			return err
		},
	} {
		if build() == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// waitFor polls cond, which a background goroutine will make true, for up to
// 10 seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestCachingResolverServesStaleWhileRefreshing(t *testing.T) {
	db := &planDB{plans: map[string]tollgate.Plan{"acme": growthPlan}}
	c, clock := newCache(t, db, 0)
	ctx := context.Background()
	c.ResolvePlan(ctx, "acme")
	db.gate = make(chan struct{}) // the database hangs from now on
	defer close(db.gate)
	clock.Advance(61 * time.Second)
	done := make(chan tollgate.Plan)
	go func() { p, _ := c.ResolvePlan(ctx, "acme"); done <- p }()
	select {
	case p := <-done:
		if p.Name != growthPlan.Name {
			t.Fatalf("got %v, want the cached growth plan", p.Name)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a request with a recently cached plan waited on a hung database")
	}
}

func TestCachingResolverSurvivesPanics(t *testing.T) {
	var calls atomic.Int64
	c, err := tollgate.NewCachingResolver(tollgate.PlanResolverFunc(func(context.Context, string) (tollgate.Plan, error) {
		calls.Add(1)
		panic("database driver bug")
	}), time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.ResolvePlan(context.Background(), "acme")
	if err == nil || !strings.Contains(err.Error(), "panicked") || !strings.Contains(err.Error(), "database driver bug") {
		t.Fatalf("a panicking resolver gave %v, want an error naming the panic", err)
	}
	// The failure is remembered for a moment rather than retried on
	// every request.
	c.ResolvePlan(context.Background(), "acme")
	if n := calls.Load(); n != 1 {
		t.Errorf("%d lookups, want 1 within a second of the failure", n)
	}
}

func TestCachingResolverAbandonsLookupsThatIgnoreTheirContext(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	c, err := tollgate.NewCachingResolver(tollgate.PlanResolverFunc(func(context.Context, string) (tollgate.Plan, error) {
		<-block // ignores its context
		return freePlan, nil
	}), time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	tollgate.WithLookupTimeout(c, 50*time.Millisecond)
	start := time.Now()
	_, err = c.ResolvePlan(context.Background(), "acme")
	if err == nil || time.Since(start) > 2*time.Second {
		t.Fatalf("a hung resolver: %v after %v, want an error after about the lookup timeout", err, time.Since(start))
	}
}

func TestCachingResolverRefusesLongTenants(t *testing.T) {
	db := &planDB{plans: map[string]tollgate.Plan{}}
	c, _ := newCache(t, db, 0)
	if _, err := c.ResolvePlan(context.Background(), strings.Repeat("x", 257)); !errors.Is(err, tollgate.ErrInvalidTenant) {
		t.Fatalf("long tenant: %v", err)
	}
	if db.lookups.Load() != 0 || c.Len() != 0 {
		t.Fatal("a refused tenant reached the database or the cache")
	}
}
