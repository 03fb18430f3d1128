package tollgate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/storekit"
	"github.com/tollgate-go/tollgate/core/storetest"
)

var errStoreDown = errors.New("store down")

// failingStore fails every Op but Check.
type failingStore struct{ calls atomic.Int64 }

func (s *failingStore) Do(_ context.Context, op *storekit.Op) error {
	switch op.Kind {
	case storekit.Check:
		return nil
	case storekit.LoadOverrides, storekit.SaveOverride:
		return errors.ErrUnsupported
	}
	s.calls.Add(1)
	return errStoreDown
}

// newStore returns the store the Limiter tests run on: the reference model,
// on clock.
func newStore(clock *storetest.Clock) tollgate.Store { return storetest.NewModelStore(clock.Now) }

func defaultResolver(t *testing.T) *tollgate.StaticResolver {
	t.Helper()
	r, err := tollgate.NewStaticResolver(tollgate.DefaultPlans(), "free", map[string]string{"acme": "enterprise"})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// newLimiter returns a Limiter over store (a new store on the returned clock
// if nil) with the default plans, acme on enterprise.
func newLimiter(t *testing.T, store tollgate.Store, opts ...tollgate.Option) (*tollgate.Limiter, *storetest.Clock) {
	t.Helper()
	clock := storetest.NewClock()
	if store == nil {
		store = newStore(clock)
	}
	opts = append([]tollgate.Option{tollgate.WithClock(clock.Now), tollgate.WithLogger(nil)}, opts...)
	l, err := tollgate.New(store, defaultResolver(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l, clock
}

// newModelLimiter returns a Limiter over the reference store with plans,
// both on the returned clock.
func newModelLimiter(t *testing.T, plans tollgate.PlanResolver, opts ...tollgate.Option) (*tollgate.Limiter, *storetest.Clock) {
	t.Helper()
	clock := storetest.NewClock()
	opts = append([]tollgate.Option{tollgate.WithClock(clock.Now), tollgate.WithLogger(nil)}, opts...)
	l, err := tollgate.New(newStore(clock), plans, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l, clock
}

func TestLimiterDecides(t *testing.T) {
	l, clock := newLimiter(t, nil)
	ctx := context.Background()
	d, err := l.Take(ctx, tollgate.Request{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if !d.HasFigures() || !d.Allowed || d.Plan != "enterprise" || d.Policy != "enterprise" || d.Cost != 1 ||
		d.Remaining != 1999 || d.ResetAfter != 5*time.Millisecond || !d.Time.Equal(clock.Now()) || d.Degraded {
		t.Fatalf("got %+v", d)
	}
	if p, r := d.Policies(), d.Results(); len(p) != 1 || len(r) != 1 || p[0].Name != "enterprise" || r[0].Remaining != 1999 {
		t.Fatalf("policies %+v results %+v", p, r)
	}
	for i := 0; i < 2; i++ {
		if d, _ = l.Take(ctx, tollgate.Request{Tenant: "other", Cost: 10}); !d.Allowed {
			t.Fatalf("take %d of 10 tokens from a free bucket of 20 denied: %+v", i, d)
		}
	}
	if d, _ = l.Take(ctx, tollgate.Request{Tenant: "other"}); d.Allowed || d.RetryAfter != 500*time.Millisecond {
		t.Fatalf("21st token of a free bucket: %+v", d)
	}
}

func TestLimiterRejectsImpossibleRequests(t *testing.T) {
	l, _ := newLimiter(t, nil)
	ctx := context.Background()
	_, err := l.Take(ctx, tollgate.Request{Tenant: "t", Cost: 21})
	if !errors.Is(err, tollgate.ErrInvalidLimit) || !strings.Contains(err.Error(), `"free"`) {
		t.Errorf("cost 21 on free (burst 20): %v, want ErrCostExceedsBurst naming the plan", err)
	}
	if _, err := l.Take(ctx, tollgate.Request{Tenant: "t", Cost: -1}); !errors.Is(err, tollgate.ErrInvalidLimit) {
		t.Errorf("cost -1: %v", err)
	}
	for _, tenant := range []string{"", strings.Repeat("x", 257), strings.Repeat("y", 1<<20)} {
		if _, err := l.Take(ctx, tollgate.Request{Tenant: tenant}); !errors.Is(err, tollgate.ErrInvalidTenant) {
			t.Errorf("tenant of %d bytes: %v, want ErrInvalidTenant", len(tenant), err)
		}
	}
	if d, err := l.Take(ctx, tollgate.Request{Tenant: strings.Repeat("x", 256)}); err != nil || !d.Allowed {
		t.Errorf("tenant of MaxTenantLength bytes: %+v, %v", d, err)
	}
}

func TestFailurePolicy(t *testing.T) {
	ctx := context.Background()
	t.Run("open", func(t *testing.T) {
		l, _ := newLimiter(t, &failingStore{})
		d, err := l.Take(ctx, tollgate.Request{Tenant: "t"})
		if err != nil || !d.Allowed || !d.Degraded || d.HasFigures() || !errors.Is(d.Err, errStoreDown) || d.Policies() != nil {
			t.Fatalf("fail-open: %+v, %v", d, err)
		}
	})
	t.Run("closed", func(t *testing.T) {
		l, _ := newLimiter(t, &failingStore{}, tollgate.WithFailClosed(true))
		d, err := l.Take(ctx, tollgate.Request{Tenant: "t"})
		if err != nil || d.Allowed || !d.Degraded || d.HasFigures() {
			t.Fatalf("fail-closed: %+v, %v", d, err)
		}
	})
	t.Run("fallback", func(t *testing.T) {
		clock := storetest.NewClock()
		l, _ := newLimiter(t, &failingStore{}, tollgate.WithFallback(newStore(clock), 1), tollgate.WithFailClosed(true))
		allowed := 0
		for i := 0; i < 25; i++ {
			d, err := l.Take(ctx, tollgate.Request{Tenant: "t"})
			if err != nil || !d.Degraded || !d.HasFigures() {
				t.Fatalf("fallback decision %+v, %v", d, err)
			}
			if d.Allowed {
				allowed++
			}
		}
		if allowed != 20 {
			t.Errorf("fallback allowed %d of 25, want the free burst of 20", allowed)
		}
	})
	t.Run("fallback fails too", func(t *testing.T) {
		l, _ := newLimiter(t, &failingStore{}, tollgate.WithFallback(&failingStore{}, 1), tollgate.WithFailClosed(true))
		d, _ := l.Take(ctx, tollgate.Request{Tenant: "t"})
		if d.Allowed || !d.Degraded || d.HasFigures() || !errors.Is(d.Err, errStoreDown) {
			t.Fatalf("%+v", d)
		}
	})
	t.Run("resolver fails", func(t *testing.T) {
		broken := tollgate.PlanResolverFunc(func(context.Context, string) (tollgate.Plan, error) {
			return tollgate.Plan{}, errors.New("db down")
		})
		store := &failingStore{}
		for _, closed := range []bool{false, true} {
			l, err := tollgate.New(store, broken, tollgate.WithFailClosed(closed), tollgate.WithLogger(nil))
			if err != nil {
				t.Fatal(err)
			}
			d, err := l.Take(ctx, tollgate.Request{Tenant: "t"})
			if err != nil || !d.Degraded || d.Allowed == closed || !strings.Contains(d.Err.Error(), "db down") || d.FailureKind() != "resolver" {
				t.Errorf("closed %v: %+v, %v", closed, d, err)
			}
		}
		if n := store.calls.Load(); n != 0 {
			t.Errorf("store called %d times without a plan", n)
		}
	})
}

func TestResolversCannotHurtRequests(t *testing.T) {
	ctx := context.Background()
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	t.Run("panic", func(t *testing.T) {
		panicky := tollgate.PlanResolverFunc(func(context.Context, string) (tollgate.Plan, error) { panic("nil map in the plan cache") })
		l, err := tollgate.New(storetestModel(), panicky, tollgate.WithLogger(logger), tollgate.WithFailClosed(true))
		if err != nil {
			t.Fatal(err)
		}
		d, err := l.Take(ctx, tollgate.Request{Tenant: "t"})
		if err != nil || d.Allowed || !d.Degraded || !strings.Contains(d.Err.Error(), "panicked") {
			t.Fatalf("panicking resolver: %+v, %v", d, err)
		}
		if !strings.Contains(buf.String(), "plan resolver failed") || !strings.Contains(buf.String(), "nil map in the plan cache") {
			t.Errorf("the panic was not logged: %s", buf.String())
		}
	})
	t.Run("ignores its context", func(t *testing.T) {
		block := make(chan struct{})
		defer close(block)
		hung := tollgate.PlanResolverFunc(func(context.Context, string) (tollgate.Plan, error) {
			<-block
			return tollgate.DefaultPlans()[0], nil
		})
		l, err := tollgate.New(storetestModel(), hung, tollgate.WithLogger(nil), tollgate.WithResolverTimeout(30*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			start := time.Now()
			d, err := l.Take(ctx, tollgate.Request{Tenant: "t"})
			if err != nil || !d.Allowed || !d.Degraded {
				t.Fatalf("hung resolver: %+v, %v", d, err)
			}
			// The bound is what matters here, not speed: the test
			// machine may be busy, so allow it a second.
			if took := time.Since(start); took > time.Second {
				t.Fatalf("request %d waited %v on a hung resolver, bound 30ms", i, took)
			}
		}
	})
	t.Run("caching resolver over a hung database", func(t *testing.T) {
		block := make(chan struct{})
		defer close(block)
		c, err := tollgate.NewCachingResolver(tollgate.PlanResolverFunc(func(context.Context, string) (tollgate.Plan, error) {
			<-block
			return tollgate.DefaultPlans()[0], nil
		}), time.Minute, 0)
		if err != nil {
			t.Fatal(err)
		}
		l, err := tollgate.New(storetestModel(), c, tollgate.WithLogger(nil), tollgate.WithResolverTimeout(30*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if d, err := l.Take(ctx, tollgate.Request{Tenant: "t"}); err != nil || !d.Degraded {
			t.Fatalf("%+v, %v", d, err)
		}
		if took := time.Since(start); took > time.Second {
			t.Fatalf("waited %v", took)
		}
	})
}

// checkedStore is a Store whose Check reports err.
type checkedStore struct {
	failingStore
	err error
}

func (s *checkedStore) Do(ctx context.Context, op *storekit.Op) error {
	if op.Kind == storekit.Check {
		return s.err
	}
	return s.failingStore.Do(ctx, op)
}

func TestNewRejectsBadConfiguration(t *testing.T) {
	store := storetestModel()
	free := tollgate.SinglePlan(tollgate.DefaultPlans()[0])
	var typedNil *storetest.ModelStore
	var typedNilResolver *tollgate.StaticResolver
	cases := map[string]func() (*tollgate.Limiter, error){
		"nil store":          func() (*tollgate.Limiter, error) { return tollgate.New(nil, free) },
		"typed-nil store":    func() (*tollgate.Limiter, error) { return tollgate.New(typedNil, free) },
		"nil resolver":       func() (*tollgate.Limiter, error) { return tollgate.New(store, nil) },
		"typed-nil resolver": func() (*tollgate.Limiter, error) { return tollgate.New(store, typedNilResolver) },
		"no replicas": func() (*tollgate.Limiter, error) {
			return tollgate.New(store, free, tollgate.WithFallback(storetestModel(), 0))
		},
		"zero resolver bound": func() (*tollgate.Limiter, error) { return tollgate.New(store, free, tollgate.WithResolverTimeout(-1)) },
		"invalid single plan": func() (*tollgate.Limiter, error) {
			return tollgate.New(store, tollgate.SinglePlan(tollgate.Plan{Name: "p", Limit: tollgate.Limit{Rate: 0, Burst: 1}}))
		},
		"shadow plan it lacks": func() (*tollgate.Limiter, error) {
			return tollgate.New(store, defaultResolver(t), tollgate.WithShadow("Free"))
		},
		"misconfigured store": func() (*tollgate.Limiter, error) {
			return tollgate.New(&checkedStore{err: errors.Join(tollgate.ErrMisconfigured, errors.New("WRONGPASS"))}, free)
		},
		"misconfigured fallback": func() (*tollgate.Limiter, error) {
			return tollgate.New(store, free, tollgate.WithFallback(&checkedStore{err: tollgate.ErrMisconfigured}, 1))
		},
	}
	for name, build := range cases {
		if l, err := build(); err == nil || l != nil {
			t.Errorf("%s: got %v, %v; want an error", name, l, err)
		}
	}
	// A store that is merely out of reach at start is the failure
	// policy's business, not a reason to refuse to start.
	if _, err := tollgate.New(&checkedStore{err: errStoreDown}, free, tollgate.WithLogger(nil)); err != nil {
		t.Errorf("unreachable store: %v", err)
	}
}

func TestPlanChangeAppliesOnNextRequest(t *testing.T) {
	clock := storetest.NewClock()
	resolver, _ := tollgate.NewStaticResolver(tollgate.DefaultPlans(), "free", nil)
	l, _ := tollgate.New(newStore(clock), resolver, tollgate.WithLogger(nil), tollgate.WithClock(clock.Now))
	ctx := context.Background()
	d, _ := l.Take(ctx, tollgate.Request{Tenant: "globex"})
	if d.Plan != "free" {
		t.Fatalf("plan %q before the upgrade", d.Plan)
	}
	if err := resolver.Assign("globex", "growth"); err != nil {
		t.Fatal(err)
	}
	// The bucket owes the 0.5s of the free token it spent: 25 growth
	// tokens, and this request takes one more.
	if d, _ = l.Take(ctx, tollgate.Request{Tenant: "globex"}); d.Plan != "growth" || d.Remaining != 500-25-1 {
		t.Fatalf("after the upgrade: plan %q remaining %d", d.Plan, d.Remaining)
	}
	if err := resolver.Assign("globex", "platinum"); !errors.Is(err, tollgate.ErrUnknownPlan) {
		t.Errorf("assigning an unknown plan: %v", err)
	}
}

// TestStaticResolverPlansAreCompiledOnce: a StaticResolver's plans were
// compiled when it was made, so its decisions never fill the Limiter's plan
// cache; another resolver's plans go through that cache, and both decide
// alike.
func TestStaticResolverPlansAreCompiledOnce(t *testing.T) {
	static, _ := tollgate.NewStaticResolver(tollgate.DefaultPlans(), "free", map[string]string{"acme": "growth"})
	other := tollgate.PlanResolverFunc(func(ctx context.Context, tenant string) (tollgate.Plan, error) {
		return static.ResolvePlan(ctx, tenant)
	})
	ctx := context.Background()
	var got [2][]tollgate.Decision
	for i, r := range []tollgate.PlanResolver{static, other} {
		clock := storetest.NewClock()
		l, err := tollgate.New(newStore(clock), r, tollgate.WithLogger(nil), tollgate.WithClock(clock.Now))
		if err != nil {
			t.Fatal(err)
		}
		for _, tenant := range []string{"acme", "globex", "acme"} {
			d, err := l.Take(ctx, tollgate.Request{Tenant: tenant, Cost: 3})
			if err != nil {
				t.Fatal(err)
			}
			got[i] = append(got[i], d)
		}
		want := 0
		if i == 1 {
			want = 2 // growth and free
		}
		if n := tollgate.CachedPlans(l); n != want {
			t.Errorf("resolver %d: %d plans in the Limiter's cache, want %d", i, n, want)
		}
	}
	for j := range got[0] {
		a, b := got[0][j], got[1][j]
		if a.Plan != b.Plan || a.Allowed != b.Allowed || a.Remaining != b.Remaining || a.Policy != b.Policy || a.ResetAfter != b.ResetAfter {
			t.Errorf("decision %d: static %s %v %d, other %s %v %d", j, a.Plan, a.Allowed, a.Remaining, b.Plan, b.Allowed, b.Remaining)
		}
	}
	if got[0][0].Plan != "growth" || got[0][1].Plan != "free" {
		t.Errorf("plans %q and %q, want growth and free", got[0][0].Plan, got[0][1].Plan)
	}

	// SinglePlan's plan is compiled too, and a copy: changing the
	// caller's policies later changes neither it nor its decisions.
	policies := []tollgate.Policy{{Quota: tollgate.Quota{Tokens: 2, Period: tollgate.Daily}}}
	single := tollgate.SinglePlan(tollgate.Plan{Name: "tiny", Limit: tollgate.Limit{Rate: 1, Burst: 10}, Policies: policies})
	policies[0].Quota.Tokens = 1000
	clock := storetest.NewClock()
	l, _ := tollgate.New(newStore(clock), single, tollgate.WithLogger(nil), tollgate.WithClock(clock.Now))
	allowed := 0
	for range 5 {
		d, _ := l.Take(ctx, tollgate.Request{Tenant: "t"})
		if d.Allowed {
			allowed++
		}
		if n := d.Policies()[1].Quota.Tokens; n != 2 {
			t.Fatalf("SinglePlan: the decision's plan has a quota of %d, want 2", n)
		}
	}
	if allowed != 2 || tollgate.CachedPlans(l) != 0 {
		t.Errorf("SinglePlan: %d allowed (want the quota's 2), %d plans cached (want 0)", allowed, tollgate.CachedPlans(l))
	}
}

// recorder is an Observer that keeps copies of the decisions it sees.
type recorder struct {
	mu        sync.Mutex
	decisions []tollgate.Decision
}

func (r *recorder) Observe(_ context.Context, d *tollgate.Decision) {
	r.mu.Lock()
	r.decisions = append(r.decisions, *d)
	r.mu.Unlock()
}

func TestObserversSeeEveryDecision(t *testing.T) {
	var rec recorder
	l, _ := newLimiter(t, nil, tollgate.WithObserver(&rec))
	ctx := context.Background()
	for i := 0; i < 23; i++ {
		l.Take(ctx, tollgate.Request{Tenant: "t", Method: "GET", Route: "/api/hello"})
	}
	l.Take(ctx, tollgate.Request{Tenant: "bad\x00tenant"})
	if len(rec.decisions) != 24 {
		t.Fatalf("%d decisions observed, want 24", len(rec.decisions))
	}
	outcomes := map[string]int{}
	for _, d := range rec.decisions {
		outcomes[d.Outcome()]++
	}
	if outcomes["allowed"] != 20 || outcomes["denied"] != 3 || outcomes["rejected"] != 1 {
		t.Errorf("outcomes %v", outcomes)
	}
	e := rec.decisions[20]
	if e.Tenant != "t" || e.Plan != "free" || e.Policy != "free" || e.Method != "GET" || e.Route != "/api/hello" ||
		e.Allowed || e.RetryAfter != 500*time.Millisecond || e.Capacity() != 20 {
		t.Errorf("denial %+v", e)
	}
	if k := rec.decisions[23].FailureKind(); k != "invalid" {
		t.Errorf("a rejected tenant's failure kind %q, want invalid", k)
	}
}

func TestThrottleLogIsSampledPerTenant(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	clock := storetest.NewClock()
	resolver, _ := tollgate.NewStaticResolver(tollgate.DefaultPlans(), "free", nil)
	l, err := tollgate.New(newStore(clock), resolver, tollgate.WithLogger(logger), tollgate.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	throttled := map[string]int64{}
	take := func(tenant string) {
		d, _ := l.Take(ctx, tollgate.Request{Tenant: tenant, Method: "POST", Route: "/api/reports"})
		if !d.Allowed {
			throttled[tenant]++
		}
	}
	// "loop" floods at 1,000 requests a second for 5 seconds while
	// "steady" sends 2 a second, within its plan.
	for ms := 0; ms < 5000; ms++ {
		take("loop")
		if ms%500 == 0 {
			take("steady")
		}
		clock.Advance(time.Millisecond)
	}
	// Both go quiet; any later request reports what was left unlogged.
	clock.Advance(2 * time.Second)
	take("steady")

	lines := decodeLines(t, &buf)
	accounted := map[string]int64{}
	perTenant := map[string]int{}
	for _, line := range lines {
		tenant := line["tenant_id"].(string)
		perTenant[tenant]++
		accounted[tenant] += int64(line["suppressed"].(float64))
		if line["msg"] == "request throttled" {
			accounted[tenant]++
		}
	}
	if throttled["loop"] < 4900 {
		t.Fatalf("loop was throttled only %d times", throttled["loop"])
	}
	if accounted["loop"] != throttled["loop"] {
		t.Errorf("log accounts for %d throttled requests of loop, want all %d", accounted["loop"], throttled["loop"])
	}
	// One line a second, plus the final count.
	if n := perTenant["loop"]; n > 7 {
		t.Errorf("%d log lines for a 5-second flood, want at most 7", n)
	}
	if perTenant["steady"] != 0 {
		t.Errorf("%d lines for a tenant within its plan", perTenant["steady"])
	}
	first := lines[0]
	for field, want := range map[string]any{
		"msg": "request throttled", "level": "WARN", "tenant_id": "loop", "plan": "free", "policy": "free", "cost": 1.0,
		"limit": 20.0, "rate": 2.0, "remaining": 0.0, "method": "POST",
		"route": "/api/reports", "suppressed": 0.0,
	} {
		if first[field] != want {
			t.Errorf("first line %s = %v, want %v", field, first[field], want)
		}
	}
	if _, ok := first["retry_after_ms"].(float64); !ok {
		t.Errorf("first line has no retry_after_ms: %v", first)
	}
	last := lines[len(lines)-1]
	if last["msg"] != "throttled requests not logged" || last["tenant_id"] != "loop" {
		t.Errorf("last line %v, want the final count for loop", last)
	}
}

// TestDelayedRequestsLogged: the Limiter's own log counts requests granted
// after a wait, with their delay, sampled per tenant at level Info, apart
// from the throttle lines.
func TestDelayedRequestsLogged(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	resolver, _ := tollgate.NewStaticResolver(tollgate.DefaultPlans(), "free", nil)
	l, clock := newModelLimiter(t, resolver, tollgate.WithLogger(logger))
	ctx := context.Background()
	take := func(tenant string, maxDelay time.Duration) tollgate.Decision {
		d, err := l.Take(ctx, tollgate.Request{Tenant: tenant, MaxDelay: maxDelay, Method: "GET", Route: "/api/hello"})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for range 20 { // the free plan's burst
		take("slow", 0)
	}
	// Five reservations, 500ms apart: one line, four suppressed.
	for i := range 5 {
		if d := take("slow", 10*time.Second); !d.Allowed || d.Delay != time.Duration(i+1)*500*time.Millisecond {
			t.Fatalf("reservation %d: %+v", i, d)
		}
	}
	if d := take("slow", 0); d.Allowed {
		t.Fatal("the bucket is not empty")
	}
	clock.Advance(2 * time.Second)
	take("other", 0) // any decision an interval later reports the quiet tenant
	lines := decodeLines(t, &buf)
	byMsg := map[string][]map[string]any{}
	for _, line := range lines {
		byMsg[line["msg"].(string)] = append(byMsg[line["msg"].(string)], line)
	}
	delayed := byMsg["request delayed"]
	if len(delayed) != 1 {
		t.Fatalf("%d request delayed lines, want 1 (sampled): %v", len(delayed), lines)
	}
	for field, want := range map[string]any{
		"level": "INFO", "tenant_id": "slow", "plan": "free", "policy": "free", "limit": 20.0, "rate": 2.0,
		"cost": 1.0, "remaining": 0.0, "delay_ms": 500.0, "method": "GET", "route": "/api/hello", "suppressed": 0.0,
	} {
		if delayed[0][field] != want {
			t.Errorf("request delayed %s = %v, want %v", field, delayed[0][field], want)
		}
	}
	quiet := byMsg["delayed requests not logged"]
	if len(quiet) != 1 || quiet[0]["tenant_id"] != "slow" || quiet[0]["suppressed"] != 4.0 {
		t.Errorf("delayed requests not logged: %v, want one line for slow counting 4", quiet)
	}
	// The denial is a throttle line of its own.
	if th := byMsg["request throttled"]; len(th) != 1 || th[0]["tenant_id"] != "slow" {
		t.Errorf("request throttled lines: %v, want the one denial", th)
	}
}

func decodeLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func TestFallbackFiguresDescribeTheFallbackBucket(t *testing.T) {
	l, _ := newLimiter(t, &failingStore{}, tollgate.WithFallback(storetestModel(), 2))
	d, _ := l.Take(context.Background(), tollgate.Request{Tenant: "t"})
	p := d.Policies()
	if !d.Fallback || len(p) != 1 || p[0].Limit.Burst != 10 || p[0].Limit.Rate != 1 || d.Remaining != 9 {
		t.Fatalf("fallback policies %+v remaining %d, want the halved free bucket (10 at 1/s)", p, d.Remaining)
	}
}

func storetestModel() *storetest.ModelStore { return storetest.NewModelStore(time.Now) }
