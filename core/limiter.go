package tollgate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"
)

// DefaultStoreTimeout bounds each Store call unless WithStoreTimeout says
// otherwise: long enough for a Redis round trip under load, short enough that
// a dead Redis never stalls a request noticeably. It is the one timeout of a
// decision: the Limiter hands the deadline to the Store (Op.Deadline), and
// the stores use it when called without one.
const DefaultStoreTimeout = 50 * time.Millisecond

// DefaultResolverTimeout bounds each plan lookup unless WithResolverTimeout
// says otherwise.
const DefaultResolverTimeout = 100 * time.Millisecond

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

// A Limiter limits each tenant to the policies of its plan. It resolves the
// tenant's Plan, takes the request's cost from every policy that applies in
// one atomic Store operation, applies its failure policy when the store or
// the resolver fails, and reports throttled requests. Build one with New;
// the zero Limiter is not usable. A Limiter is safe for concurrent use.
type Limiter struct {
	store            Store
	multi            MultiStore // store, if it runs Ops
	plans            PlanResolver
	bounded          boundedResolver  // plans, if it never blocks past a deadline
	precompiled      compiledResolver // plans, if its plans are compiled already
	policy           FailurePolicy
	fallback         Store
	storeTimeout     time.Duration
	resolverTimeout  time.Duration
	onThrottle       []func(context.Context, ThrottleEvent)
	observers        []Observer
	shadowAll        bool                // every plan is in shadow mode
	shadowPlans      map[string]struct{} // the plans in shadow mode, if not all
	shadowHeaders    bool
	logger           *slog.Logger
	failureLog       *sampler
	throttleLog      *throttleLog // the default throttle logger, if any
	compiled         planCache
	fallbackCompiled planCache // the plans as a LimitingStore fallback derives them
	now              func() time.Time
	testClock        bool // now is a test's clock, not the time: deadlines use the real one
}

// An Option configures a Limiter. Options may come in any order.
type Option func(*Limiter)

// WithFailurePolicy sets what the Limiter answers when its Store or its
// PlanResolver fails (default FailOpen).
func WithFailurePolicy(p FailurePolicy) Option {
	return func(l *Limiter) { l.policy = p }
}

// WithFallbackStore makes the Limiter ask s when its Store fails; the
// failure policy then applies only if s fails too, or if the plan could not
// be resolved. A memory.Store with limits divided by the number of replicas
// is the usual fallback for a Redis store (see redisstore.DividedStore).
func WithFallbackStore(s Store) Option {
	return func(l *Limiter) { l.fallback = s }
}

// WithStoreTimeout bounds each decision's Store call (default
// DefaultStoreTimeout); a call that takes longer counts as a failure. It is
// the only store timeout: the Limiter passes the deadline down.
func WithStoreTimeout(d time.Duration) Option {
	return func(l *Limiter) { l.storeTimeout = d }
}

// WithResolverTimeout bounds each plan lookup (default
// DefaultResolverTimeout). A lookup that takes longer, even one that ignores
// its context, counts as a resolver failure and the failure policy decides;
// the request never waits longer. A CachingResolver keeps looking up in the
// background meanwhile.
func WithResolverTimeout(d time.Duration) Option {
	return func(l *Limiter) { l.resolverTimeout = d }
}

// WithLogger sets the logger for throttled and delayed requests and for
// failures (default slog.Default()). Throttle lines are sampled per tenant
// as NewThrottleLogger describes, and so are the lines of delayed requests.
// WithLogger(nil) turns logging off.
func WithLogger(logger *slog.Logger) Option {
	return func(l *Limiter) { l.logger = logger }
}

// WithOnThrottle adds fn to the functions called, in the request's
// goroutine, for every denied request. fn must be quick; hand slow work to
// another goroutine.
func WithOnThrottle(fn func(ctx context.Context, e ThrottleEvent)) Option {
	return func(l *Limiter) {
		if fn != nil {
			l.onThrottle = append(l.onThrottle, fn)
		}
	}
}

// WithShadow puts plans in shadow mode, or every plan if none is named:
// every decision is made, counted, logged and observed as usual, but a
// request is never denied because a policy is exhausted. Its Decision is
// then allowed and marked Shadow, its Outcome is OutcomeShadowDenied, and
// its throttle event and log line say shadow. It is the safe way to turn
// limits on for an API that had none, one plan at a time: shadow the
// plans not yet enforced. The failure policy still applies when the store
// fails. Several WithShadow options add up.
//
// Shadow decisions carry no rate-limit figures for the client unless
// WithShadowHeaders(true): a shadow rollout should change nothing the
// clients see, and well-behaved clients slow down on figures alone.
func WithShadow(plans ...string) Option {
	return func(l *Limiter) {
		if len(plans) == 0 {
			l.shadowAll = true
			return
		}
		if l.shadowPlans == nil {
			l.shadowPlans = map[string]struct{}{}
		}
		for _, p := range plans {
			l.shadowPlans[p] = struct{}{}
		}
	}
}

// WithShadowHeaders sets whether decisions of plans in shadow mode carry
// their figures for the client (default false; see WithShadow).
func WithShadowHeaders(send bool) Option {
	return func(l *Limiter) { l.shadowHeaders = send }
}

// shadowed reports whether plan is in shadow mode.
func (l *Limiter) shadowed(plan string) bool {
	if l.shadowAll {
		return true
	}
	_, ok := l.shadowPlans[plan]
	return ok
}

// withClock makes the Limiter read the time of its decisions from now; tests
// reach it through export_test.go and core/internal/testhooks.
func withClock(now func() time.Time) Option {
	return func(l *Limiter) { l.now, l.testClock = now, now != nil }
}

// deadline returns when a store call started at the decision time now must
// end.
func (l *Limiter) deadline(now time.Time) time.Time {
	if l.testClock {
		now = time.Now()
	}
	return now.Add(l.storeTimeout)
}

// checkTimeout bounds the Check that New makes of each store.
const checkTimeout = time.Second

// New returns a Limiter that keeps its limits in store and finds plans with
// plans. Use SinglePlan for a single limit for everyone.
//
// New calls Check on stores that implement Checker and fails if one reports
// a misconfiguration (an error wrapping ErrMisconfigured); a store that is
// merely out of reach is logged and left to the failure policy. It also
// fails on a nil or typed-nil store or resolver and on invalid options.
func New(store Store, plans PlanResolver, opts ...Option) (*Limiter, error) {
	l := &Limiter{
		store:           store,
		plans:           plans,
		storeTimeout:    DefaultStoreTimeout,
		resolverTimeout: DefaultResolverTimeout,
		logger:          slog.Default(),
	}
	for _, o := range opts {
		if o != nil {
			o(l)
		}
	}
	switch {
	case isNil(store):
		return nil, errors.New("tollgate: New: the store is nil")
	case isNil(plans):
		return nil, errors.New("tollgate: New: the plan resolver is nil")
	case l.fallback != nil && isNil(l.fallback):
		return nil, errors.New("tollgate: New: WithFallbackStore: the store is nil")
	case l.policy != FailOpen && l.policy != FailClosed:
		return nil, fmt.Errorf("tollgate: New: WithFailurePolicy: unknown %v", l.policy)
	case l.storeTimeout <= 0:
		return nil, fmt.Errorf("tollgate: New: WithStoreTimeout must be > 0, got %v", l.storeTimeout)
	case l.resolverTimeout <= 0:
		return nil, fmt.Errorf("tollgate: New: WithResolverTimeout must be > 0, got %v", l.resolverTimeout)
	}
	if l.now == nil {
		l.now = newFastClock().now
	}
	l.multi, _ = store.(MultiStore)
	l.bounded, _ = plans.(boundedResolver)
	l.precompiled, _ = plans.(compiledResolver)
	if l.logger != nil {
		l.throttleLog = newThrottleLog(l.logger, time.Second).withDelays()
		l.onThrottle = append([]func(context.Context, ThrottleEvent){l.throttleLog.log}, l.onThrottle...)
		l.failureLog = newSampler(time.Second, nil)
	}
	for _, s := range []Store{store, l.fallback} {
		if err := l.check(s); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// check asks s, if it can tell, whether it can work.
func (l *Limiter) check(s Store) error {
	c, ok := s.(Checker)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	err := c.Check(ctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrMisconfigured):
		return fmt.Errorf("tollgate: New: the store can not work: %w", err)
	}
	if l.logger != nil {
		l.logger.LogAttrs(ctx, slog.LevelWarn, "rate limiter store not reachable at start; the failure policy applies until it is",
			slog.String("policy", l.policy.String()), slog.String("error", err.Error()))
	}
	return nil
}

// isNil reports whether v is nil or a nil pointer, map, func or the like
// inside an interface, which would panic on first use.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan, reflect.Slice, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

// ops recycles Ops, whose Results and Marks then need no allocation.
var ops = sync.Pool{New: func() any {
	return &Op{Results: make([]Result, 0, inlinePolicies), Marks: make([]int64, 0, inlinePolicies)}
}}

// Take decides on req: it resolves the tenant's plan and takes req.Cost
// tokens from every policy of the plan that applies. A failing Store or
// PlanResolver gives a Degraded decision under the failure policy, not an
// error. Take returns an error only for a request that can never be decided:
// an invalid tenant (ErrInvalidTenant), a negative cost, a cost above what
// a policy of the tenant's plan ever allows (ErrCostExceedsBurst; the
// Decision then names the plan), an invalid plan, or a store that cannot
// apply the plan's policies. It logs the configuration errors.
func (l *Limiter) Take(ctx context.Context, req Request) (Decision, error) {
	var d Decision
	err := l.decide(ctx, &req, &d)
	return d, err
}

// Decide is Take writing its Decision into d, which saves copying it.
func (l *Limiter) Decide(ctx context.Context, req *Request, d *Decision) error {
	return l.decide(ctx, req, d)
}

func (l *Limiter) decide(ctx context.Context, req *Request, d *Decision) error {
	var st decideState
	return l.decideWith(ctx, req, d, &st)
}

// decideWith is decide with st's inputs (Wait's deadline).
func (l *Limiter) decideWith(ctx context.Context, req *Request, d *Decision, st *decideState) error {
	*d = Decision{Tenant: req.Tenant, Cost: req.Cost, Budget: req.Budget, Time: l.now()}
	if d.Cost == 0 {
		d.Cost = 1
	}
	err := l.decideInto(ctx, req, d, st)
	if err != nil {
		d.Outcome, d.Allowed = OutcomeRejected, false
		if st.kind == "" {
			st.kind = "invalid"
		}
	}
	if len(l.observers) > 0 {
		l.observe(ctx, req, d, st.latency, st.kind)
	}
	return err
}

// decideState is what a decision records for its observers, and what Wait
// tells it and learns from it.
type decideState struct {
	latency time.Duration
	kind    string

	// until, if not zero, bounds the request's MaxDelay: the wait must
	// end by then. It is counted from the decision's own clock reading,
	// which spares Wait a reading of its own.
	until time.Time
	// maxDelay is the MaxDelay the store was given.
	maxDelay time.Duration
}

func (l *Limiter) decideInto(ctx context.Context, req *Request, d *Decision, st *decideState) error {
	if err := checkTenant(req.Tenant); err != nil {
		return err
	}
	if d.Cost < 0 {
		return l.misconfigured(ctx, req, fmt.Errorf("%w: cost must be >= 1, got %d", ErrInvalidLimit, req.Cost))
	}
	var cp *compiledPlan
	if l.precompiled != nil {
		cp = l.precompiled.resolveCompiled(req.Tenant)
	}
	if cp != nil {
		d.Plan = cp.plan
	} else {
		plan, err := l.resolve(ctx, req.Tenant)
		if err != nil {
			st.kind = "resolver"
			l.failOver(ctx, d, req, nil, fmt.Errorf("tollgate: resolving the plan of tenant %q: %w", req.Tenant, err))
			return nil
		}
		d.Plan = plan
		if cp, err = l.compiled.get(&plan); err != nil {
			return l.misconfigured(ctx, req, fmt.Errorf("tollgate: the resolver gave tenant %q an invalid plan: %w", req.Tenant, err))
		}
	}
	rs := cp.ruleSet(req.Budget)
	if err := rs.checkCost(d.Cost); err != nil {
		return l.misconfigured(ctx, req, fmt.Errorf("plan %q of tenant %q: %w", d.Plan.Name, req.Tenant, err))
	}
	st.maxDelay = max(req.MaxDelay, 0)
	if !st.until.IsZero() {
		now := d.Time
		if l.testClock {
			now = time.Now() // deadlines are on the real clock
		}
		st.maxDelay = min(st.maxDelay, max(st.until.Sub(now), time.Microsecond))
	}
	op := ops.Get().(*Op)
	defer ops.Put(op)
	*op = Op{Kind: OpTake, Key: req.Tenant, Rules: rs.rules, Cost: d.Cost, MaxDelay: st.maxDelay, Now: d.Time,
		Deadline: l.deadline(d.Time), Results: op.Results[:0], Marks: op.Marks[:0]}
	err := l.run(ctx, l.store, l.multi, op)
	if len(l.observers) > 0 {
		st.latency = op.Latency
		if l.multi == nil {
			// A plain Store does not report its latency: time it.
			st.latency = l.now().Sub(d.Time)
		}
	}
	if err != nil {
		if errors.Is(err, ErrInvalidLimit) || errors.Is(err, ErrCostExceedsBurst) {
			return l.misconfigured(ctx, req, err)
		}
		st.kind = ErrorKind(err)
		l.failOver(ctx, d, req, op, err)
		return nil
	}
	l.settle(ctx, req, d, rs, op)
	return nil
}

// settle records a store's answer to op in d: the figures, a reservation,
// shadow mode, and the throttle report.
func (l *Limiter) settle(ctx context.Context, req *Request, d *Decision, rs *ruleSet, op *Op) {
	d.setResults(rs, op.Allowed, op.Results)
	if op.Allowed && op.Delay > 0 {
		d.Delay, d.Outcome = op.Delay, OutcomeDelayed
		d.setMarks(op.Marks)
	}
	shadow := (l.shadowAll || l.shadowPlans != nil) && l.shadowed(d.Plan.Name)
	if shadow && !op.Allowed {
		d.Allowed, d.Shadow, d.Outcome = true, true, OutcomeShadowDenied
	}
	if shadow && !l.shadowHeaders {
		d.figures = false
	}
	if !op.Allowed {
		l.throttled(ctx, req, d)
	} else if l.throttleLog != nil {
		if d.Delay > 0 {
			l.throttleLog.logDelayed(ctx, req, d)
		} else {
			l.throttleLog.delays.flushQuiet(d.Time)
		}
		// Report tenants whose throttling has stopped.
		l.throttleLog.sampler.flushQuiet(d.Time)
	}
}

// run applies op to s: through Do when s is a MultiStore, and otherwise
// through Take, which can apply a single token bucket only.
func (l *Limiter) run(ctx context.Context, s Store, multi MultiStore, op *Op) error {
	if multi != nil {
		return multi.Do(ctx, op)
	}
	if op.Kind != OpTake || len(op.Rules) != 1 || op.Rules[0].IsQuota() || op.Rules[0].Sub != "" || op.MaxDelay > 0 {
		return fmt.Errorf("%w: the store %T applies a single token bucket; this needs a tollgate.MultiStore (%d policies, %v)",
			ErrInvalidLimit, s, len(op.Rules), op.Kind)
	}
	ctx, cancel := context.WithDeadline(ctx, op.Deadline)
	defer cancel()
	r, err := s.Take(ctx, op.Key, op.Rules[0].Limit, op.Cost)
	if err != nil {
		return err
	}
	op.Allowed = r.Allowed
	op.Results = append(op.Results[:0], r)
	return nil
}

// failOver decides when the store or the resolver failed: through the
// fallback store if there is one and the plan is known (op is set), else by
// policy.
func (l *Limiter) failOver(ctx context.Context, d *Decision, req *Request, op *Op, cause error) {
	d.Degraded = true
	d.Err = cause
	l.logFailure(ctx, cause, op != nil)
	if op != nil && l.fallback != nil {
		multi, _ := l.fallback.(MultiStore)
		err := l.run(ctx, l.fallback, multi, op)
		if err == nil {
			d.Fallback = true
			l.settle(ctx, req, d, l.fallbackRules(d, req.Budget), op)
			return
		}
		d.Err = errors.Join(cause, fmt.Errorf("tollgate: fallback store: %w", err))
	}
	d.Allowed = l.policy == FailOpen
	d.Outcome = OutcomeFailedOpen
	if !d.Allowed {
		d.Outcome = OutcomeFailedClosed
	}
}

// fallbackRules returns the policies that the fallback store decided d
// under: the plan's own, or, for a LimitingStore, its buckets' limits as
// the store derives them, so that the figures describe the buckets that
// decided.
func (l *Limiter) fallbackRules(d *Decision, budget string) *ruleSet {
	ls, ok := l.fallback.(LimitingStore)
	cp, err := l.compiled.get(&d.Plan)
	if !ok || err != nil {
		return cp.ruleSet(budget)
	}
	derived := d.Plan
	derived.Limit = ls.LimitFor(d.Plan.Limit, d.Cost)
	derived.Policies = append([]Policy(nil), d.Plan.Policies...)
	for i := range derived.Policies {
		if p := &derived.Policies[i]; p.Quota.IsZero() {
			p.Limit = ls.LimitFor(p.Limit, d.Cost)
		}
	}
	dcp, err := l.fallbackCompiled.get(&derived)
	if err != nil {
		return cp.ruleSet(budget)
	}
	return dcp.ruleSet(budget)
}

// misconfigured logs err, a mistake in the application's configuration or
// plans, and returns it.
func (l *Limiter) misconfigured(ctx context.Context, req *Request, err error) error {
	if l.logger == nil {
		return err
	}
	if log, suppressed := l.failureLog.admit("misconfiguration", l.now()); log {
		l.logger.LogAttrs(ctx, slog.LevelError, "rate limiter misconfigured: request refused",
			slog.String("tenant_id", req.Tenant),
			slog.Int64("cost", req.Cost),
			slog.String("budget", req.Budget),
			slog.String("method", req.Method),
			slog.String("route", req.route()),
			slog.String("error", err.Error()),
			slog.Int64("suppressed", suppressed),
		)
	}
	return err
}

func (l *Limiter) logFailure(ctx context.Context, err error, planKnown bool) {
	if l.logger == nil {
		return
	}
	key, msg := "store", "rate limiter store failed"
	switch {
	case !planKnown:
		key, msg = "resolver", "plan resolver failed"
	case errors.Is(err, ErrMisconfigured):
		key, msg = "store-misconfigured", "rate limiter store misconfigured"
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

// Inspect reports tenant's state in every policy of its plan, budgets
// included, without taking anything: the Decision's Allowed says whether a
// request of cost 1 drawing from no budget would be allowed now, and
// Policies and Results give each policy's figures. It needs a MultiStore.
func (l *Limiter) Inspect(ctx context.Context, tenant string) (Decision, error) {
	d := Decision{Tenant: tenant, Cost: 1, Time: l.now()}
	op, rs, err := l.tenantOp(ctx, OpInspect, &d)
	if err != nil {
		return d, err
	}
	defer ops.Put(op)
	if err := l.multi.Do(ctx, op); err != nil {
		return d, err
	}
	base := op.Results[:len(rs.base.rules)]
	allowed := true
	for _, r := range base {
		allowed = allowed && r.Allowed
	}
	d.setResults(rs.all, allowed, op.Results)
	d.Allowed = allowed
	return d, nil
}

// Reset forgets tenant's state in every policy of its plan, budgets
// included: its buckets are full again and the current period of its
// quotas unused, for every replica that shares the store. It needs a
// MultiStore.
func (l *Limiter) Reset(ctx context.Context, tenant string) error {
	d := Decision{Tenant: tenant, Cost: 1, Time: l.now()}
	op, _, err := l.tenantOp(ctx, OpReset, &d)
	if err != nil {
		return err
	}
	defer ops.Put(op)
	return l.multi.Do(ctx, op)
}

// tenantOp prepares an Op of kind over every rule of tenant's plan.
func (l *Limiter) tenantOp(ctx context.Context, kind OpKind, d *Decision) (*Op, *compiledPlan, error) {
	if err := checkTenant(d.Tenant); err != nil {
		return nil, nil, err
	}
	if l.multi == nil {
		return nil, nil, fmt.Errorf("tollgate: %v needs a tollgate.MultiStore; %T is not one: %w", kind, l.store, errors.ErrUnsupported)
	}
	plan, err := l.resolve(ctx, d.Tenant)
	if err != nil {
		return nil, nil, fmt.Errorf("tollgate: resolving the plan of tenant %q: %w", d.Tenant, err)
	}
	d.Plan = plan
	cp, err := l.compiled.get(&plan)
	if err != nil {
		return nil, nil, err
	}
	op := ops.Get().(*Op)
	*op = Op{Kind: kind, Key: d.Tenant, Rules: cp.all.rules, Cost: 1, Now: d.Time,
		Deadline: l.deadline(d.Time), Results: op.Results[:0], Marks: op.Marks[:0]}
	return op, cp, nil
}
