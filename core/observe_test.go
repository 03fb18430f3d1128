package tollgate_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// recorder is an Observer that keeps what it is told.
type recorder struct {
	mu  sync.Mutex
	obs []tollgate.Observation
}

func (r *recorder) Observe(_ context.Context, o tollgate.Observation) {
	r.mu.Lock()
	r.obs = append(r.obs, o)
	r.mu.Unlock()
}

func (r *recorder) outcomes() map[tollgate.Outcome]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[tollgate.Outcome]int{}
	for _, o := range r.obs {
		m[o.Outcome]++
	}
	return m
}

func TestObserverSeesEveryDecision(t *testing.T) {
	rec := &recorder{}
	l, _ := newModelLimiter(t, tollgate.SinglePlan(trial), tollgate.WithObserver(rec))
	ctx := context.Background()
	for i := 0; i < 12; i++ {
		l.Take(ctx, tollgate.Request{Tenant: "t", Method: "GET", Route: "/api/hello"})
	}
	l.Take(ctx, tollgate.Request{Tenant: "t", Cost: 11})            // can never pass: rejected
	l.Take(ctx, tollgate.Request{Tenant: strings.Repeat("x", 300)}) // rejected
	got := rec.outcomes()
	if got[tollgate.OutcomeAllowed] != 10 || got[tollgate.OutcomeDenied] != 2 || got[tollgate.OutcomeRejected] != 2 {
		t.Fatalf("outcomes %v", got)
	}
	o := rec.obs[10]
	if o.Plan != "trial" || o.Policy != "trial" || o.Route != "/api/hello" || o.Method != "GET" || o.Cost != 1 ||
		o.Remaining != 0 || o.Capacity != 10 || o.Tenant != "t" || o.ErrorKind != "" {
		t.Fatalf("denial observed as %+v", o)
	}
	if k := rec.obs[12].ErrorKind; k != "invalid" {
		t.Errorf("rejected decision kind %q", k)
	}

	failing := &recorder{}
	lf, _ := newLimiter(t, &failingStore{}, tollgate.WithObserver(failing))
	lf.Take(ctx, tollgate.Request{Tenant: "t"})
	if o := failing.obs[0]; o.Outcome != tollgate.OutcomeFailedOpen || o.ErrorKind != "unavailable" || o.Plan != "free" {
		t.Fatalf("store failure observed as %+v", o)
	}
}

// allowAll is a MultiStore that allows everything at no cost, so that an
// allocation test sees the Limiter's own.
type allowAll struct{}

func (allowAll) Take(context.Context, string, tollgate.Limit, int64) (tollgate.Result, error) {
	return tollgate.Result{Allowed: true}, nil
}

func (allowAll) Do(_ context.Context, op *tollgate.Op) error {
	op.Allowed = true
	op.Results = op.Results[:0]
	for range op.Rules {
		op.Results = append(op.Results, tollgate.Result{Allowed: true, Remaining: 1})
	}
	return nil
}

func TestObserverCostsNothingUnused(t *testing.T) {
	store := allowAll{}
	l, err := tollgate.New(store, tollgate.SinglePlan(tollgate.Plan{Name: "big", Limit: tollgate.Limit{Rate: 1e6, Burst: 1e9}}),
		tollgate.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := tollgate.Request{Tenant: "t"}
	var d tollgate.Decision
	if n := testing.AllocsPerRun(1000, func() { l.Decide(ctx, &req, &d) }); n != 0 {
		t.Errorf("a decision allocates %v times without observers, want 0", n)
	}
	l2, _ := tollgate.New(store, tollgate.SinglePlan(tollgate.Plan{Name: "big", Limit: tollgate.Limit{Rate: 1e6, Burst: 1e9}}),
		tollgate.WithLogger(nil), tollgate.WithObserver(nopObserver{}))
	if n := testing.AllocsPerRun(1000, func() { l2.Decide(ctx, &req, &d) }); n != 0 {
		t.Errorf("a decision allocates %v times with an observer, want 0", n)
	}
}

type nopObserver struct{}

func (nopObserver) Observe(context.Context, tollgate.Observation) {}

func TestShadowMode(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	rec := &recorder{}
	var events int
	resolver, _ := tollgate.NewStaticResolver(tollgate.DefaultPlans(), "free", map[string]string{"initech": "startup"})
	l, clock := newModelLimiter(t, resolver, tollgate.WithShadow("startup"), tollgate.WithObserver(rec),
		tollgate.WithLogger(logger), tollgate.WithOnThrottle(func(context.Context, tollgate.ThrottleEvent) { events++ }))
	ctx := context.Background()
	_ = clock
	for i := 0; i < 150; i++ {
		d, err := l.Take(ctx, tollgate.Request{Tenant: "initech"})
		if err != nil || !d.Allowed {
			t.Fatalf("request %d of a shadowed plan: %+v, %v", i, d, err)
		}
		if d.HasFigures() {
			t.Fatalf("a shadow decision shows figures without WithShadowHeaders: %+v", d)
		}
		if i >= 100 && (!d.Shadow || d.Outcome != tollgate.OutcomeShadowDenied) {
			t.Fatalf("request %d: %+v, want a shadow denial", i, d)
		}
	}
	if got := rec.outcomes(); got[tollgate.OutcomeShadowDenied] != 50 || got[tollgate.OutcomeAllowed] != 100 {
		t.Fatalf("outcomes %v", got)
	}
	if events != 50 || !strings.Contains(buf.String(), "would be throttled (shadow mode)") {
		t.Fatalf("%d throttle events; log %s", events, buf.String())
	}
	// Plans not in shadow mode are enforced.
	for i := 0; i < 20; i++ {
		l.Take(ctx, tollgate.Request{Tenant: "other"})
	}
	if d, _ := l.Take(ctx, tollgate.Request{Tenant: "other"}); d.Allowed || d.Shadow || !d.HasFigures() {
		t.Fatalf("free plan: %+v, want an enforced denial", d)
	}
	// With WithShadowHeaders the figures are shown.
	l2, _ := newModelLimiter(t, resolver, tollgate.WithShadow(), tollgate.WithShadowHeaders(true))
	if d, _ := l2.Take(ctx, tollgate.Request{Tenant: "initech"}); !d.HasFigures() {
		t.Fatal("WithShadowHeaders(true): no figures")
	}
}

func TestWait(t *testing.T) {
	ten := tollgate.Plan{Name: "ten", Limit: tollgate.Limit{Rate: 100, Burst: 1}} // a token every 10ms
	l, _ := newRealLimiter(t, tollgate.SinglePlan(ten))
	ctx := context.Background()
	start := time.Now()
	for i := 0; i < 5; i++ {
		d, err := l.Wait(ctx, tollgate.Request{Tenant: "t"})
		if err != nil || !d.Allowed {
			t.Fatalf("wait %d: %+v, %v", i, d, err)
		}
	}
	// 5 requests on a bucket of 1 at 100/s: the last is due 40ms in.
	if took := time.Since(start); took < 40*time.Millisecond {
		t.Fatalf("5 waits took %v, less than the rate allows", took)
	}
	// A wait that can not fit the deadline fails at once, taking nothing.
	short, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
	defer cancel()
	l.Take(ctx, tollgate.Request{Tenant: "u", MaxDelay: time.Second}) // the bucket of 1
	for i := 0; i < 3; i++ {
		l.Take(ctx, tollgate.Request{Tenant: "u", MaxDelay: time.Second}) // 30ms of reservations
	}
	began := time.Now()
	if _, err := l.Wait(short, tollgate.Request{Tenant: "u"}); err == nil || time.Since(began) > 3*time.Millisecond && !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("a wait past the deadline: %v after %v", err, time.Since(began))
	}
}

func TestWaitGivesBackWhenCancelled(t *testing.T) {
	slow := tollgate.Plan{Name: "slow", Limit: tollgate.Limit{Rate: 1, Burst: 1}}
	l, _ := newRealLimiter(t, tollgate.SinglePlan(slow))
	ctx := context.Background()
	l.Take(ctx, tollgate.Request{Tenant: "t"}) // empty the bucket: the next token is 1s away
	wctx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	if _, err := l.Wait(wctx, tollgate.Request{Tenant: "t"}); err != context.Canceled {
		t.Fatalf("cancelled wait: %v", err)
	}
	// The cancelled reservation gave its token back: the next caller's
	// wait is 1s from the first take, not 2s.
	d, _ := l.Take(ctx, tollgate.Request{Tenant: "t", MaxDelay: 10 * time.Second})
	if !d.Allowed || d.Delay > time.Second {
		t.Fatalf("after the cancel: %+v, want a delay of at most 1s", d)
	}
}

func TestWaitForAQuota(t *testing.T) {
	daily := tollgate.Plan{Name: "daily", Limit: tollgate.Limit{Rate: 100, Burst: 100}, Policies: []tollgate.Policy{{Quota: tollgate.PerDay(2)}}}
	l, _ := newRealLimiter(t, tollgate.SinglePlan(daily))
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if _, err := l.Wait(ctx, tollgate.Request{Tenant: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	// Without a deadline, a quota exhausted for hours is an error, not a
	// wait of hours.
	if _, err := l.Wait(ctx, tollgate.Request{Tenant: "t"}); !errorsIs(err, tollgate.ErrWaitExceedsDeadline) || !strings.Contains(err.Error(), "daily-daily") {
		t.Fatalf("exhausted quota: %v", err)
	}
	if _, err := l.Wait(ctx, tollgate.Request{Tenant: "t", Cost: 3}); !errorsIs(err, tollgate.ErrCostExceedsBurst) {
		t.Fatalf("cost above the quota: %v", err)
	}
}

// newRealLimiter returns a Limiter over the reference store on the real
// clock, for the tests of waiting.
func newRealLimiter(t *testing.T, plans tollgate.PlanResolver, opts ...tollgate.Option) (*tollgate.Limiter, *recorder) {
	t.Helper()
	rec := &recorder{}
	opts = append([]tollgate.Option{tollgate.WithLogger(nil), tollgate.WithObserver(rec)}, opts...)
	l, err := tollgate.New(storetestModel(), plans, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l, rec
}
