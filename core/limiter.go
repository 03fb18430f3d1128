package tollgate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// DefaultStoreTimeout bounds each Store call unless WithStoreTimeout says
// otherwise: long enough for a Redis round trip under load, short enough that
// a dead Redis never stalls a request noticeably.
const DefaultStoreTimeout = 50 * time.Millisecond

// A FailurePolicy says what a Limiter answers when it can not decide because
// its Store or its PlanResolver failed.
type FailurePolicy int

const (
	// FailOpen allows the request, without rate-limit figures: the API
	// keeps serving while the store is down. It is the default.
	FailOpen FailurePolicy = iota
	// FailClosed denies the request; middleware answers 503.
	FailClosed
)

// String returns "fail-open" or "fail-closed".
func (p FailurePolicy) String() string {
	switch p {
	case FailOpen:
		return "fail-open"
	case FailClosed:
		return "fail-closed"
	}
	return fmt.Sprintf("FailurePolicy(%d)", int(p))
}

// A Request is what a Limiter decides on.
type Request struct {
	Tenant string
	Cost   int64 // tokens the request takes; 0 means 1

	// Method and Route describe the request in throttle events and logs
	// only; Route should be the route pattern, not the raw path, so that
	// it does not multiply log cardinality.
	Method string
	Route  string

	// The net/http middleware names the route only when an event needs
	// it, as some routers (chi) must search their tree to find it.
	routeOf func(*http.Request) string
	httpReq *http.Request
}

// route returns req.Route, working it out if the middleware left it to
// the Limiter.
func (req *Request) route() string {
	if req.Route == "" && req.routeOf != nil {
		return req.routeOf(req.httpReq)
	}
	return req.Route
}

// A Decision is a Limiter's answer to one Request.
type Decision struct {
	Allowed    bool
	Tenant     string
	Plan       Plan
	Cost       int64
	Remaining  int64         // whole tokens left in the bucket
	RetryAfter time.Duration // > 0 only when denied: until Cost tokens are available
	ResetAfter time.Duration // until the bucket is full again
	Time       time.Time     // when the decision was made

	// Degraded reports that the Store or the PlanResolver failed and the
	// failure policy decided; Err holds the failure. A degraded decision
	// carries rate-limit figures only if a fallback store made it.
	Degraded bool
	Err      error

	figures     bool         // Remaining, RetryAfter and ResetAfter come from a store
	planHeaders *planHeaders // the Limiter's cached header values for Plan
}

// HasFigures reports whether the decision's Remaining, RetryAfter and
// ResetAfter come from a store, so that rate-limit headers would tell the
// truth. A fail-open or fail-closed decision has none.
func (d *Decision) HasFigures() bool { return d.figures }

// A Limiter limits each tenant to the token bucket of its plan. It resolves
// the tenant's Plan, takes the request's cost from the tenant's bucket in a
// Store, applies its failure policy when either fails, and reports throttled
// requests. Build one with New; the zero Limiter is not usable. A Limiter is
// safe for concurrent use.
type Limiter struct {
	store        Store
	storeBlocks  bool
	timedStore   TimedStore // store, when it never blocks and takes the time from the Limiter
	plans        PlanResolver
	policy       FailurePolicy
	fallback     Store
	storeTimeout time.Duration
	onThrottle   []func(context.Context, ThrottleEvent)
	logger       *slog.Logger
	failureLog   *sampler
	throttleLog  *throttleLog // the default throttle logger, if any
	headers      planHeaderCache
	now          func() time.Time
}

// An Option configures a Limiter.
type Option func(*Limiter)

// WithFailurePolicy sets what the Limiter answers when its Store or its
// PlanResolver fails (default FailOpen).
func WithFailurePolicy(p FailurePolicy) Option {
	return func(l *Limiter) { l.policy = p }
}

// WithFallbackStore makes the Limiter ask s when its Store fails; the
// failure policy then applies only if s fails too, or if the plan could not
// be resolved. A memory.Store with limits divided by the number of replicas
// is the usual fallback for a Redis store.
func WithFallbackStore(s Store) Option {
	return func(l *Limiter) { l.fallback = s }
}

// WithStoreTimeout bounds each Store call (default DefaultStoreTimeout); a
// call that takes longer counts as a failure. Stores that never block, such
// as memory.Store, are called without a deadline.
func WithStoreTimeout(d time.Duration) Option {
	return func(l *Limiter) { l.storeTimeout = d }
}

// WithLogger sets the logger for throttled requests and store failures
// (default slog.Default()). Throttle lines are sampled per tenant as
// NewThrottleLogger describes. WithLogger(nil) turns logging off.
func WithLogger(logger *slog.Logger) Option {
	return func(l *Limiter) { l.logger = logger }
}

// WithOnThrottle adds fn to the functions called, in the request's
// goroutine, for every denied request. fn must be quick; hand slow work to
// another goroutine.
func WithOnThrottle(fn func(ctx context.Context, e ThrottleEvent)) Option {
	return func(l *Limiter) { l.onThrottle = append(l.onThrottle, fn) }
}

// WithClock makes the Limiter read the time of its decisions from now; it is
// meant for tests. Stores keep their own clocks. WithClock(nil) keeps the
// default clock.
func WithClock(now func() time.Time) Option {
	return func(l *Limiter) { l.now = now }
}

// New returns a Limiter that keeps buckets in store and finds plans with
// plans. Use SinglePlan for a single limit for everyone.
func New(store Store, plans PlanResolver, opts ...Option) (*Limiter, error) {
	l := &Limiter{
		store:        store,
		plans:        plans,
		storeTimeout: DefaultStoreTimeout,
		logger:       slog.Default(),
	}
	for _, o := range opts {
		o(l)
	}
	switch {
	case store == nil:
		return nil, errors.New("tollgate: New: store is nil")
	case plans == nil:
		return nil, errors.New("tollgate: New: plan resolver is nil")
	case l.policy != FailOpen && l.policy != FailClosed:
		return nil, fmt.Errorf("tollgate: New: unknown %v", l.policy)
	case l.storeTimeout <= 0:
		return nil, fmt.Errorf("tollgate: New: WithStoreTimeout must be > 0, got %v", l.storeTimeout)
	}
	if l.now == nil {
		l.now = newFastClock().now
	}
	_, nonBlocking := store.(NonBlockingStore)
	l.storeBlocks = !nonBlocking
	if timed, ok := store.(TimedStore); ok && nonBlocking {
		l.timedStore = timed
	}
	if l.logger != nil {
		l.throttleLog = newThrottleLog(l.logger, time.Second)
		l.onThrottle = append([]func(context.Context, ThrottleEvent){l.throttleLog.log}, l.onThrottle...)
		l.failureLog = newSampler(time.Second, nil)
	}
	return l, nil
}

// Take decides on req: it resolves the tenant's plan and takes req.Cost
// tokens from the tenant's bucket. A failing Store or PlanResolver gives a
// Degraded decision under the failure policy, not an error. Take returns an
// error only for a request that can never be allowed: a negative cost, or a
// cost above the burst of the tenant's plan (the Decision then names the
// plan).
func (l *Limiter) Take(ctx context.Context, req Request) (Decision, error) {
	var d Decision
	err := l.decide(ctx, &req, &d)
	return d, err
}

// decide is Take writing into d, so that Answer can decide in place.
func (l *Limiter) decide(ctx context.Context, req *Request, d *Decision) error {
	*d = Decision{Tenant: req.Tenant, Cost: req.Cost, Time: l.now()}
	if d.Cost == 0 {
		d.Cost = 1
	}
	if d.Cost < 0 {
		return fmt.Errorf("%w: cost must be >= 1, got %d", ErrInvalidLimit, req.Cost)
	}
	plan, err := l.plans.ResolvePlan(ctx, req.Tenant)
	if err != nil {
		l.failOver(ctx, d, req, fmt.Errorf("tollgate: resolving the plan of tenant %q: %w", req.Tenant, err), false)
		return nil
	}
	d.Plan = plan
	if err := plan.Limit.Validate(); err != nil {
		return fmt.Errorf("plan %q: %w", plan.Name, err)
	}
	if err := plan.Limit.CheckCost(d.Cost); err != nil {
		return fmt.Errorf("plan %q of tenant %q: %w", plan.Name, req.Tenant, err)
	}
	var r Result
	if l.timedStore != nil {
		r, err = l.timedStore.TakeAt(ctx, req.Tenant, plan.Limit, d.Cost, d.Time)
	} else {
		r, err = l.takeFrom(ctx, l.store, l.storeBlocks, req.Tenant, plan.Limit, d.Cost)
	}
	if err != nil {
		if errors.Is(err, ErrInvalidLimit) || errors.Is(err, ErrCostExceedsBurst) {
			return err
		}
		l.failOver(ctx, d, req, err, true)
		return nil
	}
	d.setResult(r)
	d.planHeaders = l.headers.get(plan)
	if !d.Allowed {
		l.throttled(ctx, req, d)
	} else if l.throttleLog != nil {
		// Report tenants whose throttling has stopped.
		l.throttleLog.sampler.flushQuiet(d.Time)
	}
	return nil
}

func (l *Limiter) takeFrom(ctx context.Context, s Store, blocks bool, key string, limit Limit, cost int64) (Result, error) {
	if !blocks {
		return s.Take(ctx, key, limit, cost)
	}
	ctx, cancel := context.WithTimeout(ctx, l.storeTimeout)
	defer cancel()
	return s.Take(ctx, key, limit, cost)
}

func (d *Decision) setResult(r Result) {
	d.Allowed = r.Allowed
	d.Remaining = r.Remaining
	d.RetryAfter = r.RetryAfter
	d.ResetAfter = r.ResetAfter
	d.figures = true
}

// failOver decides when the store or the resolver failed: through the
// fallback store if there is one and the plan is known, else by policy.
func (l *Limiter) failOver(ctx context.Context, d *Decision, req *Request, cause error, planKnown bool) {
	d.Degraded = true
	d.Err = cause
	l.logFailure(ctx, cause, planKnown)
	if planKnown && l.fallback != nil {
		_, nonBlocking := l.fallback.(NonBlockingStore)
		r, err := l.takeFrom(ctx, l.fallback, !nonBlocking, req.Tenant, d.Plan.Limit, d.Cost)
		if err == nil {
			d.setResult(r)
			// The headers must describe the bucket that decided.
			effective := d.Plan
			if s, ok := l.fallback.(LimitingStore); ok {
				effective.Limit = s.LimitFor(d.Plan.Limit, d.Cost)
			}
			d.planHeaders = l.headers.get(effective)
			if !d.Allowed {
				l.throttled(ctx, req, d)
			}
			return
		}
		d.Err = errors.Join(cause, fmt.Errorf("tollgate: fallback store: %w", err))
	}
	d.Allowed = l.policy == FailOpen
}

func (l *Limiter) logFailure(ctx context.Context, err error, planKnown bool) {
	if l.logger == nil {
		return
	}
	key, msg := "store", "rate limiter store failed"
	if !planKnown {
		key, msg = "resolver", "plan resolver failed"
	}
	log, suppressed := l.failureLog.admit(key, l.now())
	if !log {
		return
	}
	attrs := []slog.Attr{
		slog.String("policy", l.policy.String()),
		slog.String("error", err.Error()),
		slog.Int64("suppressed", suppressed),
	}
	if planKnown {
		attrs = append(attrs, slog.Bool("fallback", l.fallback != nil))
	}
	l.logger.LogAttrs(ctx, slog.LevelError, msg, attrs...)
}

func (l *Limiter) throttled(ctx context.Context, req *Request, d *Decision) {
	if len(l.onThrottle) == 0 {
		return
	}
	e := ThrottleEvent{Decision: *d, Method: req.Method, Route: req.route()}
	for _, fn := range l.onThrottle {
		fn(ctx, e)
	}
}
