package tollgate_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/core/storekit"
	"github.com/tollgate-go/tollgate/core/storetest"
)

// The tests of this file are the engine's rows of the overload issue: a
// rate limiter must keep limiting, and keep its memory and goroutines
// bounded, at the moment a server is overloaded.

// saturate keeps every core busy with two spinning goroutines per core
// until the returned function is called.
func saturate(t *testing.T) (stop func()) {
	t.Helper()
	done := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for range 2 * runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := 0
			for {
				select {
				case <-done:
					return
				default:
				}
				for i := range 10_000 {
					x += i
				}
			}
		}()
	}
	return func() { once.Do(func() { close(done) }); wg.Wait() }
}

// TestSaturatedCPUKeepsLimiting: with busy goroutines beside 64 callers
// for 3 seconds, one tenant at 20/s with a burst of 10 gets at most
// burst + rate x elapsed + 1 requests, and no decision degrades, whether
// its plan comes from a plain resolver or through a CachingResolver.
func TestSaturatedCPUKeepsLimiting(t *testing.T) {
	if testing.Short() {
		t.Skip("3 s a case")
	}
	plan := tollgate.Plan{Name: "tight", Limit: tollgate.Limit{Rate: 20, Burst: 10}}
	plain := tollgate.PlanResolverFunc(func(context.Context, string) (tollgate.Plan, error) { return plan, nil })
	cached, err := tollgate.NewCachingResolver(plain, time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	for name, resolver := range map[string]tollgate.PlanResolver{"plain": plain, "caching": cached} {
		t.Run(name, func(t *testing.T) {
			store := memory.New()
			defer store.Close()
			l, err := tollgate.New(store, resolver, tollgate.WithLogger(nil))
			if err != nil {
				t.Fatal(err)
			}
			stop := saturate(t)
			defer stop()
			allowed, degraded, failed, elapsed := run64(t, l, 3*time.Second)
			stop()
			bound := 10 + 20*elapsed.Seconds() + 1
			t.Logf("%s: %d allowed in %v (bound %.1f), %d degraded, %d errors", name, allowed, elapsed.Round(time.Millisecond), bound, degraded, failed)
			if degraded != 0 || failed != 0 || float64(allowed) > bound {
				t.Fatalf("%d allowed against a bound of %.0f, %d degraded, %d errors", allowed, bound, degraded, failed)
			}
		})
	}
}

// run64 sends requests of one tenant from 64 goroutines for d.
func run64(t *testing.T, l *tollgate.Limiter, d time.Duration) (allowed, degraded, failed int64, elapsed time.Duration) {
	var a, g, f atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(d)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				dec, err := l.Take(context.Background(), tollgate.Request{Tenant: "busy"})
				switch {
				case err != nil:
					f.Add(1)
				case dec.Degraded:
					g.Add(1)
				case dec.Allowed:
					a.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed = time.Since(start)
	if elapsed > d+time.Second {
		t.Logf("the callers ran %v", elapsed)
	}
	return a.Load(), g.Load(), f.Load(), elapsed
}

// TestResolverThatNeverReturns: a resolver that ignores its context and
// never returns leaves at most 100 goroutines behind after 5,000 requests of
// one tenant, and a CachingResolver over it at most 250 after 5,000
// distinct tenants, with at most 64 lookups stuck; every request returns
// within about the resolver bound.
func TestResolverThatNeverReturns(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	hung := tollgate.PlanResolverFunc(func(context.Context, string) (tollgate.Plan, error) {
		<-block
		return tollgate.Plan{}, nil
	})
	const bound = 5 * time.Millisecond
	cases := []struct {
		name     string
		resolver func(t *testing.T) (tollgate.PlanResolver, func() int64)
		tenant   func(i int) string
		max      int
	}{
		{"plain, one tenant", func(t *testing.T) (tollgate.PlanResolver, func() int64) { return hung, nil },
			func(int) string { return "one" }, 100},
		{"caching, distinct tenants", func(t *testing.T) (tollgate.PlanResolver, func() int64) {
			c, err := tollgate.NewCachingResolver(hung, time.Minute, 0)
			if err != nil {
				t.Fatal(err)
			}
			tollgate.WithLookupTimeout(c, bound)
			return c, func() int64 { return tollgate.StuckCacheLookups(c) }
		}, func(i int) string { return fmt.Sprint("tenant-", i) }, 250},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resolver, stuck := c.resolver(t)
			l, err := tollgate.New(storetest.NewModelStore(time.Now), resolver, tollgate.WithLogger(nil), tollgate.WithResolverTimeout(bound))
			if err != nil {
				t.Fatal(err)
			}
			before := runtime.NumGoroutine()
			slowest := time.Duration(0)
			for i := range 5000 {
				start := time.Now()
				d, err := l.Take(context.Background(), tollgate.Request{Tenant: c.tenant(i)})
				if err != nil || !d.Degraded || !d.Allowed {
					t.Fatalf("request %d: %+v, %v; want fail-open", i, d, err)
				}
				slowest = max(slowest, time.Since(start))
			}
			left := runtime.NumGoroutine() - before
			t.Logf("%d goroutines left behind, slowest request %v", left, slowest)
			if left > c.max {
				t.Errorf("%d goroutines left behind, want at most %d", left, c.max)
			}
			if stuck != nil && stuck() > 64 {
				t.Errorf("%d lookups stuck, the cap is 64", stuck())
			}
			if n := tollgate.StuckLookups(l); n > 64 {
				t.Errorf("the Limiter counts %d stuck lookups, the cap is 64", n)
			}
		})
	}
}

// TestTimeZonesLoadedPerCallDoNotLeak: a resolver that builds the plan's
// quota with time.LoadLocation on every call (plans read from a database
// with a time zone) costs at most 5 MB of heap over 20,000 decisions, with
// and without a CachingResolver.
func TestTimeZonesLoadedPerCallDoNotLeak(t *testing.T) {
	if testing.Short() {
		t.Skip("40,000 decisions: make check runs it")
	}
	if _, err := time.LoadLocation("America/New_York"); err != nil {
		t.Skipf("no time zone database: %v", err)
	}
	fromDB := tollgate.PlanResolverFunc(func(context.Context, string) (tollgate.Plan, error) {
		loc, err := time.LoadLocation("America/New_York")
		if err != nil {
			return tollgate.Plan{}, err
		}
		return tollgate.Plan{Name: "daily", Limit: tollgate.Limit{Rate: 1e6, Burst: 1e6},
			Policies: []tollgate.Policy{{Quota: tollgate.Quota{Tokens: 1e12, Period: tollgate.Daily, Location: loc}}}}, nil
	})
	cached, err := tollgate.NewCachingResolver(fromDB, time.Nanosecond, 0)
	if err != nil {
		t.Fatal(err)
	}
	for name, resolver := range map[string]tollgate.PlanResolver{"plain": fromDB, "caching": cached} {
		t.Run(name, func(t *testing.T) {
			store := memory.New()
			defer store.Close()
			l, err := tollgate.New(store, resolver, tollgate.WithLogger(nil))
			if err != nil {
				t.Fatal(err)
			}
			take := func(n int) {
				for i := range n {
					if _, err := l.Take(context.Background(), tollgate.Request{Tenant: fmt.Sprint("t", i%100)}); err != nil {
						t.Fatal(err)
					}
				}
			}
			take(1000)
			before := heap()
			// 20,000 decisions: a Location kept per decision (about
			// 4 KB) would pass 5 MB in the first 1,300.
			take(20_000)
			growth := int64(heap()) - int64(before)
			t.Logf("heap growth over 20,000 decisions: %d KB; plans compiled and cached: %d", growth/1024, tollgate.CachedPlans(l))
			if growth > 5<<20 {
				t.Fatalf("heap grew %d KB over 20,000 decisions, want at most 5 MB", growth/1024)
			}
		})
	}
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestShadowChangesNothingAClientSees: a plan in shadow mode is never
// delayed, Wait never sleeps for it, and its decisions carry no figures
// unless WithShadowHeaders says so.
func TestShadowChangesNothingAClientSees(t *testing.T) {
	for _, headers := range []bool{false, true} {
		l, _ := newLimiter(t, nil, tollgate.WithShadow("free"), tollgate.WithShadowHeaders(headers))
		ctx := context.Background()
		for range 20 {
			l.Take(ctx, tollgate.Request{Tenant: "t"})
		}
		d, err := l.Take(ctx, tollgate.Request{Tenant: "t", MaxDelay: time.Second})
		if err != nil || !d.Allowed || !d.Shadow || d.Delay != 0 || d.Outcome() != "shadow_denied" || d.HasFigures() != headers {
			t.Fatalf("headers %v: over-rate shadow request with a delay allowed: %+v, %v", headers, d, err)
		}
		start := time.Now()
		d, err = l.Wait(ctx, tollgate.Request{Tenant: "t"})
		if err != nil || !d.Allowed || !d.Shadow || time.Since(start) > 100*time.Millisecond {
			t.Fatalf("shadow Wait: %+v, %v after %v", d, err, time.Since(start))
		}
	}
}

// TestWaitersWhoAllGiveUpOweNothing: 20 waiters of one tenant reserve
// tokens and all give up, in random order: the tenant then owes nothing
// for them.
func TestWaitersWhoAllGiveUpOweNothing(t *testing.T) {
	for round := range 5 {
		l, _ := newLimiter(t, nil)
		ctx := context.Background()
		for range 20 {
			l.Take(ctx, tollgate.Request{Tenant: "t"})
		}
		var reserved []tollgate.Decision
		for range 20 {
			d, err := l.Take(ctx, tollgate.Request{Tenant: "t", MaxDelay: time.Minute})
			if err != nil || !d.Allowed || d.Delay <= 0 {
				t.Fatalf("reservation: %+v, %v", d, err)
			}
			reserved = append(reserved, d)
		}
		rand.Shuffle(len(reserved), func(i, j int) { reserved[i], reserved[j] = reserved[j], reserved[i] })
		for i := range reserved {
			if err := l.Cancel(ctx, &reserved[i]); err != nil {
				t.Fatal(err)
			}
		}
		d, _ := l.Inspect(ctx, "t")
		// The burst was spent before the waiters came: the bucket is
		// where it was, owing nothing for them.
		if d.Results()[0].ResetAfter != 10*time.Second {
			t.Fatalf("round %d: after every waiter gave up the bucket is full in %v, want 10s (what the burst cost)", round, d.Results()[0].ResetAfter)
		}
	}
}

// silentStore answers Takes as the model does but never answers a Cancel
// until its context ends, like a Redis that went silent.
type silentStore struct {
	*storetest.ModelStore
	cancels atomic.Int64
}

func (s *silentStore) Do(ctx context.Context, op *storekit.Op) error {
	if op.Kind == storekit.Cancel {
		s.cancels.Add(1)
		<-ctx.Done()
		return ctx.Err()
	}
	return s.ModelStore.Do(ctx, op)
}

// TestCancelledWaitReturnsAtOnce: a Wait whose context is cancelled while
// its store is silent returns at once, not a store timeout later.
func TestCancelledWaitReturnsAtOnce(t *testing.T) {
	store := &silentStore{ModelStore: storetest.NewModelStore(time.Now)}
	l, err := tollgate.New(store, tollgate.SinglePlan(tollgate.Plan{Name: "slow", Limit: tollgate.Limit{Rate: 1, Burst: 1}}), tollgate.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	l.Take(context.Background(), tollgate.Request{Tenant: "t"})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err = l.Wait(ctx, tollgate.Request{Tenant: "t"})
	if took := time.Since(start); err == nil || took > 500*time.Millisecond {
		t.Fatalf("cancelled Wait: %v after %v, want the cancellation at about 50ms", err, took)
	}
	waitFor(t, func() bool { return store.cancels.Load() == 1 })
}

func TestNilLimiterMethodsReturnErrors(t *testing.T) {
	var l *tollgate.Limiter
	ctx := context.Background()
	if _, err := l.Take(ctx, tollgate.Request{Tenant: "t"}); err == nil {
		t.Error("Take")
	}
	if _, err := l.Wait(ctx, tollgate.Request{Tenant: "t"}); err == nil {
		t.Error("Wait")
	}
	if _, err := l.Inspect(ctx, "t"); err == nil {
		t.Error("Inspect")
	}
	if err := l.Reset(ctx, "t"); err == nil {
		t.Error("Reset")
	}
	if err := l.Cancel(ctx, &tollgate.Decision{Delay: time.Second}); err == nil {
		t.Error("Cancel")
	}
	if err := l.CheckBudget("reports"); err == nil {
		t.Error("CheckBudget")
	}
	if _, ok := l.StoreStats(); ok {
		t.Error("StoreStats")
	}
}

func TestTenantsWithControlCharactersAreInvalid(t *testing.T) {
	l, _ := newLimiter(t, nil)
	for _, tenant := range []string{"a\x00b", "line\nbreak", "tab\there", "del\x7f"} {
		if _, err := l.Take(context.Background(), tollgate.Request{Tenant: tenant}); !errorsIs(err, tollgate.ErrInvalidTenant) {
			t.Errorf("%q: %v, want ErrInvalidTenant", tenant, err)
		}
	}
	for _, tenant := range []string{"\u202eevil", "caf\xe9", "ok-tenant"} {
		if d, err := l.Take(context.Background(), tollgate.Request{Tenant: tenant}); err != nil || !d.Allowed {
			t.Errorf("%q: %+v, %v; bidi controls and invalid UTF-8 are tenants like any other", tenant, d, err)
		}
	}
}

// TestMistakesFailEarly: a budget or a shadow plan that the resolver cannot
// have is an error when the resolver knows its plans, and is logged once at
// the first decision that meets it otherwise.
func TestMistakesFailEarly(t *testing.T) {
	l, _ := newLimiter(t, nil)
	if err := l.CheckBudget("exprts"); !errorsIs(err, tollgate.ErrInvalidLimit) {
		t.Errorf("a budget no plan has: %v", err)
	}
	if err := l.CheckBudget("bad budget"); err == nil {
		t.Error("an invalid budget name was accepted")
	}
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	free := tollgate.DefaultPlans()[0]
	dynamic := tollgate.PlanResolverFunc(func(context.Context, string) (tollgate.Plan, error) { return free, nil })
	l, err := tollgate.New(storetest.NewModelStore(time.Now), dynamic, tollgate.WithLogger(logger), tollgate.WithShadow("Free"))
	if err != nil {
		t.Fatalf("a dynamic resolver can not tell its plans, so New must accept a shadow plan: %v", err)
	}
	if err := l.CheckBudget("exprts"); err != nil {
		t.Errorf("a dynamic resolver can not tell its budgets: %v", err)
	}
	for range 3 {
		l.Take(context.Background(), tollgate.Request{Tenant: "t", Budget: "exprts"})
	}
	log := buf.String()
	if n := strings.Count(log, "shadow plan differs"); n != 1 {
		t.Errorf("the shadow typo was logged %d times, want once: %s", n, log)
	}
	if n := strings.Count(log, "budget in no policy"); n != 1 {
		t.Errorf("the budget typo was logged %d times, want once: %s", n, log)
	}
}

func errorsIs(err, target error) bool {
	return err != nil && strings.Contains(err.Error(), target.Error())
}
