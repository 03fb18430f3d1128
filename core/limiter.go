package tollgate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/hooks"
	"github.com/tollgate-go/tollgate/core/storekit"
)

// A Store keeps the state of every tenant's policies and applies a
// Limiter's operations to them: see package storekit, which store authors
// import. memory.New and redisstore.New return the two that tollgate ships.
type Store interface {
	Do(ctx context.Context, op *storekit.Op) error
}

// ErrMisconfigured is wrapped by errors that a Store reports for a mistake
// that waiting will not mend: wrong credentials, missing permissions, a
// database that does not exist, an invalid option. New fails on them.
var ErrMisconfigured = storekit.ErrMisconfigured

// A Limiter limits each tenant to the policies of its plan. It resolves the
// tenant's Plan, takes the request's cost from every policy that applies in
// one atomic Store operation, applies its failure policy when the store or
// the resolver fails, and tells its Observers of every decision; the first
// of them logs throttled requests. Build one with New; the zero Limiter is
// not usable, and the methods of a nil *Limiter return an error. A Limiter
// is safe for concurrent use.
type Limiter struct {
	store           Store
	plans           PlanResolver
	compiledPlans   compiledResolver // plans, if of this package
	lookups         flightGroup      // for plans that are not
	compiled        planCache        // likewise
	resolverTimeout time.Duration
	failClosed      bool
	fallback        Store
	replicas        int64
	divided         planCache // the plans as the fallback store applies them
	observers       []Observer
	shadowAll       bool
	shadowPlans     map[string]bool
	shadowHeaders   bool
	logger          *slog.Logger
	log             *decisionLog // nil when logging is off
	clock           clock
	now             func() time.Time
	mistakes        sync.Map // the configuration mistakes logged already
	admin           adminState
	noOverrides     bool // the store keeps none
	slots           slots
	// The store, and the fallback, keep slots without leases (see
	// storekit.InProcess).
	storeInProcess, fallbackInProcess bool
}

// defaultResolverTimeout bounds each plan lookup unless WithResolverTimeout
// says otherwise.
const defaultResolverTimeout = 100 * time.Millisecond

// An Option configures a Limiter. Options may come in any order.
type Option func(*Limiter)

// WithFailClosed sets what the Limiter answers when its Store or its
// PlanResolver fails: false (the default) lets the request through without
// figures, so that the API keeps serving while the store is down; true
// denies it, and middleware answers 503.
func WithFailClosed(closed bool) Option {
	return func(l *Limiter) { l.failClosed = closed }
}

// WithFallback makes the Limiter ask store when its Store fails, with each
// limit divided among replicas (rate, burst and quota tokens divided, each
// at least 1), so that a fleet of that many replicas, each on a fallback of
// its own, together keeps about the limits it keeps on the shared store. The
// failure policy then applies only if store fails too, or if the plan could
// not be resolved. A memory.Store is the usual fallback for a Redis store.
// Decisions it makes carry its figures, and Decision.Fallback says so.
func WithFallback(store Store, replicas int) Option {
	return func(l *Limiter) { l.fallback, l.replicas = store, int64(replicas) }
}

// WithResolverTimeout bounds each plan lookup (default 100 ms), counted from
// when the lookup starts running. A lookup that takes longer, even one that
// ignores its context, counts as a resolver failure and the failure policy
// decides; the request never waits longer. A CachingResolver keeps looking
// up in the background meanwhile.
func WithResolverTimeout(d time.Duration) Option {
	return func(l *Limiter) { l.resolverTimeout = d }
}

// WithLogger sets the logger of throttled and delayed requests, of failures
// and of configuration mistakes (default slog.Default()); nil turns logging
// off. Throttled requests are logged at level Warn with tenant_id, plan,
// policy, limit, rate, cost, budget, remaining, retry_after_ms, method and
// route, at most one line per tenant a second: the next line says in
// "suppressed" how many went unlogged, and a tenant that stops being
// throttled gets a last line, "throttled requests not logged", with the
// count of its final second. Requests granted after a wait are logged the
// same way at level Info as "request delayed".
func WithLogger(logger *slog.Logger) Option {
	return func(l *Limiter) { l.logger = logger }
}

// WithShadow puts plans in shadow mode, or every plan if none is named:
// every decision is made, counted, logged and observed as usual, but a
// request is never denied or delayed because a policy is exhausted. Its
// Decision is then allowed and marked Shadow, its outcome is
// "shadow_denied", and its log line says shadow. It is the safe way to turn
// limits on for an API that had none, one plan at a time. The failure
// policy still applies when the store fails. Several WithShadow options add
// up; New fails on a plan name that a StaticResolver or SinglePlan does not
// have.
//
// Shadow decisions carry no rate-limit figures for the client unless
// WithShadowHeaders(true): a shadow rollout should change nothing the
// clients see.
func WithShadow(plans ...string) Option {
	return func(l *Limiter) {
		if len(plans) == 0 {
			l.shadowAll = true
			return
		}
		if l.shadowPlans == nil {
			l.shadowPlans = map[string]bool{}
		}
		for _, p := range plans {
			l.shadowPlans[p] = true
		}
	}
}

// WithShadowHeaders sets whether decisions of plans in shadow mode carry
// their figures for the client (default false; see WithShadow).
func WithShadowHeaders(send bool) Option {
	return func(l *Limiter) { l.shadowHeaders = send }
}

// WithObserver adds o to the Observers the Limiter tells of every decision.
func WithObserver(o Observer) Option {
	return func(l *Limiter) {
		if !isNil(o) {
			l.observers = append(l.observers, o)
		}
	}
}

// withClock makes the Limiter read the time of its decisions from now;
// tests reach it through export_test.go and internal/hooks.
func withClock(now func() time.Time) Option {
	return func(l *Limiter) { l.now = now }
}

// checkTimeout bounds the Check that New makes of each store.
const checkTimeout = 2 * time.Second

// New returns a Limiter that keeps its limits in store and finds plans with
// plans; use SinglePlan for one plan for everyone.
//
// New fails on a nil store or resolver, an invalid option, a plan of
// SinglePlan that is not valid, a shadow plan the resolver does not have
// (when it can tell), and a store that reports a misconfiguration: wrong
// credentials or permissions, a database that does not exist. A store that
// is merely out of reach is logged, with the cause, and left to the failure
// policy.
func New(store Store, plans PlanResolver, opts ...Option) (*Limiter, error) {
	l := &Limiter{store: store, plans: plans, resolverTimeout: defaultResolverTimeout, logger: slog.Default(), replicas: 1}
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
	case l.resolverTimeout <= 0:
		return nil, fmt.Errorf("tollgate: New: WithResolverTimeout must be > 0, got %v", l.resolverTimeout)
	case l.replicas < 1:
		return nil, fmt.Errorf("tollgate: New: WithFallback: replicas must be >= 1, got %d", l.replicas)
	}
	l.compiledPlans, _ = plans.(compiledResolver)
	if s, ok := plans.(singlePlan); ok && s.err != nil {
		return nil, fmt.Errorf("tollgate: New: SinglePlan: %w", s.err)
	}
	if err := l.checkShadowPlans(); err != nil {
		return nil, err
	}
	l.lookups.resolve = plans.ResolvePlan
	_, l.storeInProcess = store.(storekit.InProcess)
	_, l.fallbackInProcess = l.fallback.(storekit.InProcess)
	if l.now == nil {
		l.clock.init()
		l.now = l.clock.now
	}
	if l.logger != nil {
		l.log = newDecisionLog(l.logger)
		l.observers = append([]Observer{l.log}, l.observers...)
	}
	for _, s := range []Store{store, l.fallback} {
		if err := l.check(s); err != nil {
			return nil, err
		}
	}
	// A replica started after an override was set applies it from its
	// first request.
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	if err := l.loadOverrides(ctx); errors.Is(err, errors.ErrUnsupported) {
		l.noOverrides = true
	}
	return l, nil
}

func (l *Limiter) checkShadowPlans() error {
	if l.compiledPlans == nil || l.shadowPlans == nil {
		return nil
	}
	known := map[string]bool{}
	for _, p := range l.compiledPlans.knownPlans() {
		known[p.Name] = true
	}
	for name := range l.shadowPlans {
		if !known[name] {
			return fmt.Errorf("%w: New: WithShadow: the resolver has no plan %q", ErrUnknownPlan, truncate(name, 80))
		}
	}
	return nil
}

// check asks s, if set, whether it can work.
func (l *Limiter) check(s Store) error {
	if isNil(s) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	err := s.Do(ctx, &storekit.Op{Kind: storekit.Check})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrMisconfigured):
		return fmt.Errorf("tollgate: New: the store can not work: %w", err)
	}
	if l.logger != nil {
		policy := "fail-open: requests are let through unlimited until it answers"
		if l.failClosed {
			policy = "fail-closed: requests are refused until it answers"
		} else if !isNil(l.fallback) && s == l.store {
			policy = "requests are decided by the fallback store until it answers"
		}
		l.logger.LogAttrs(ctx, slog.LevelWarn, "rate limiter store not reachable at start",
			slog.String("policy", policy), slog.String("error", err.Error()))
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

// maxTenantLength is the longest tenant ID a Limiter accepts, in bytes: it
// bounds what caches and logs keyed by tenant can hold.
const maxTenantLength = 256

// ErrInvalidTenant is wrapped by the error a Limiter returns for a request
// whose tenant ID is empty, longer than 256 bytes, or holds a control
// character (a NUL, a newline). It is the client's mistake, not the
// application's: middleware answers it 400.
var ErrInvalidTenant = errors.New("tollgate: invalid tenant")

// checkTenant reports why tenant can not be limited, or nil.
func checkTenant(tenant string) error {
	switch {
	case tenant == "":
		return fmt.Errorf("%w: the tenant is empty", ErrInvalidTenant)
	case len(tenant) > maxTenantLength:
		return fmt.Errorf("%w: the tenant ID is %d bytes long; at most %d are allowed", ErrInvalidTenant, len(tenant), maxTenantLength)
	}
	for i := 0; i < len(tenant); i++ {
		if c := tenant[i]; c < 0x20 || c == 0x7f {
			return fmt.Errorf("%w: the tenant ID holds the control character %#02x", ErrInvalidTenant, c)
		}
	}
	return nil
}

var errNilLimiter = errors.New("tollgate: the Limiter is nil")

// ops recycles Ops, whose Results then need no allocation.
var ops = sync.Pool{New: func() any {
	return &storekit.Op{Results: make([]Result, 0, inlinePolicies)}
}}

// Take decides on req: it resolves the tenant's plan and takes req.Cost
// tokens from every policy of the plan that applies. A failing Store or
// PlanResolver gives a Degraded decision under the failure policy, not an
// error. Take returns an error only for a request that can never be
// decided: an invalid tenant (ErrInvalidTenant), a negative cost or one
// larger than a policy of the tenant's plan ever allows (ErrInvalidLimit;
// for the latter the Decision names the plan), or a resolver that gives an
// invalid plan, which it also logs.
func (l *Limiter) Take(ctx context.Context, req Request) (Decision, error) {
	if l == nil {
		return Decision{Tenant: req.Tenant}, errNilLimiter
	}
	c := calls.Get().(*call)
	err := l.decide(ctx, &req, &c.decision, &c.op, time.Time{})
	out := c.decision
	calls.Put(c)
	return out, err
}

// A call is what a decision is made in: observers are handed a pointer to
// the Decision and the store one to the Op, so both would escape to the
// heap; pooled together, a request takes one thing from a pool.
type call struct {
	decision Decision
	op       storekit.Op
}

var calls = sync.Pool{New: func() any { return new(call) }}

// The HTTP layer decides through internal/hooks into Decisions it reuses
// (see hooks.TakeInto): this file, so that a request enters it once.
func init() {
	hooks.LimiterClock = func(now func() time.Time) any { return withClock(now) }
	hooks.TakeInto = func(ctx context.Context, l, req, d, op any) error {
		lim, r, dd := l.(*Limiter), req.(*Request), d.(*Decision)
		if lim == nil {
			*dd = Decision{Tenant: r.Tenant}
			return errNilLimiter
		}
		return lim.attempt(ctx, r, dd, op.(*storekit.Op), time.Time{})
	}
	hooks.Observe = func(ctx context.Context, l, d any) {
		if lim := l.(*Limiter); lim != nil {
			lim.observe(ctx, d.(*Decision))
		}
	}
	hooks.RouteAlways = func(l any) bool {
		lim := l.(*Limiter)
		others := len(lim.observers) // beside the Limiter's own log
		if lim.log != nil {
			others--
		}
		return others > 0
	}
}

// decide is Take into d, asking the store with op; until, if not zero,
// bounds the wait a reservation may ask for (Wait's deadline).
func (l *Limiter) decide(ctx context.Context, req *Request, d *Decision, op *storekit.Op, until time.Time) error {
	err := l.attempt(ctx, req, d, op, until)
	l.observe(ctx, d)
	return err
}

// attempt is decide without telling the observers, for Wait, which tells
// them of its last attempt only.
func (l *Limiter) attempt(ctx context.Context, req *Request, d *Decision, op *storekit.Op, until time.Time) error {
	// Zeroed in place, then set field by field: a composite literal
	// assigned through a pointer is built on the stack and copied, and the
	// copy, reading back words just written, stalls the CPU.
	*d = Decision{}
	d.Tenant, d.Cost, d.Budget, d.Method, d.Route, d.Time = req.Tenant, max(req.Cost, 1), req.Budget, req.Method, req.Route, l.now()
	err := l.decideInto(ctx, req, d, op, until)
	if err != nil {
		d.outcome, d.Allowed = outcomeRejected, false
		if d.failure == "" {
			d.failure = "invalid"
		}
	}
	return err
}

func (l *Limiter) observe(ctx context.Context, d *Decision) {
	for _, o := range l.observers {
		o.Observe(ctx, d)
	}
}

func (l *Limiter) decideInto(ctx context.Context, req *Request, d *Decision, op *storekit.Op, until time.Time) error {
	if err := checkTenant(req.Tenant); err != nil {
		return err
	}
	if req.Cost < 0 {
		return d.refuse(fmt.Errorf("%w: cost must be >= 1, got %d", ErrInvalidLimit, req.Cost))
	}
	cp, err := l.resolve(ctx, req.Tenant)
	if err != nil {
		if errors.Is(err, ErrInvalidLimit) {
			return d.refuse(fmt.Errorf("tollgate: the resolver gave tenant %q an invalid plan: %w", req.Tenant, err))
		}
		d.failure = "resolver"
		l.failOver(ctx, d, nil, nil, fmt.Errorf("tollgate: resolving the plan of tenant %q: %w", req.Tenant, err))
		return nil
	}
	if !l.noOverrides {
		// The common case, no override to look up and none to reload,
		// costs two atomic loads.
		if d.Time.UnixNano()-l.admin.loadedAt.Load() >= int64(overridesRefresh) {
			l.refreshOverrides()
		}
		if st := l.admin.state.Load(); st != nil && len(st.tenants) > 0 {
			cp = l.override(ctx, req.Tenant, cp, d.Time)
		}
	}
	d.Plan = cp.plan.Name
	rs := cp.base
	if req.Budget != "" {
		if rs = cp.ruleSet(req.Budget); rs == cp.base {
			l.mistake(ctx, "budget:"+req.Budget, "rate limiter budget in no policy of the plan: the request draws from the plan's own limits only",
				slog.String("budget", req.Budget), slog.String("plan", d.Plan))
		}
	}
	if d.Cost > rs.maxCost {
		return d.refuse(rs.checkCost(d.Cost))
	}
	shadow := l.shadowed(d.Plan)
	results := op.Results[:0]
	if results == nil {
		results = make([]Result, 0, inlinePolicies)
	}
	*op = storekit.Op{} // then set field by field, as attempt sets d
	op.Kind, op.Tenant, op.Rules, op.Cost, op.Now, op.Results = storekit.Take, req.Tenant, rs.rules, d.Cost, d.Time, results
	if len(rs.inFlight) > 0 && !l.storeInProcess {
		op.Lease, op.LeaseTTL = newLease(), leaseTTL
	}
	if req.MaxDelay > 0 && !shadow {
		// Shadow mode changes nothing a client sees: no wait either.
		op.MaxDelay = min(req.MaxDelay, maxWindow)
		if !until.IsZero() {
			op.MaxDelay = min(op.MaxDelay, max(time.Until(until), time.Microsecond))
		}
	}
	err = l.store.Do(ctx, op)
	d.Latency = op.Latency
	if err != nil {
		if errors.Is(err, ErrInvalidLimit) {
			return d.refuse(err)
		}
		d.failure = failureKind(err)
		l.failOver(ctx, d, cp, op, err)
		return nil
	}
	l.settle(d, rs, op, shadow)
	return nil
}

// shadowed reports whether plan is in shadow mode.
func (l *Limiter) shadowed(plan string) bool {
	if l.shadowAll {
		return true
	}
	if l.shadowPlans == nil {
		return false
	}
	if l.shadowPlans[plan] {
		return true
	}
	if l.compiledPlans == nil {
		for name := range l.shadowPlans {
			if strings.EqualFold(name, plan) {
				l.mistake(context.Background(), "shadow:"+name, "rate limiter shadow plan differs from a plan in case only: the plan is enforced",
					slog.String("shadow_plan", name), slog.String("plan", plan))
			}
		}
	}
	return false
}

// settle records a store's answer to op in d: the figures, a reservation,
// a slot held, and shadow mode.
func (l *Limiter) settle(d *Decision, rs *ruleSet, op *storekit.Op, shadow bool) {
	if len(rs.inFlight) > 0 {
		for i := range op.Results {
			if r := &op.Results[i]; !r.Allowed && rs.rules[i].Kind == storekit.InFlight {
				r.RetryAfter = inFlightRetry
			}
		}
		switch h, ok := op.Slot.(storekit.Held); {
		case !op.Allowed:
		case op.Lease != "":
			l.hold(d, op, rs.inFlight)
		case ok:
			l.holdUnleased(d, rs, h)
		}
	}
	setResults(d, rs, op.Allowed, op.Results)
	if op.Allowed && op.Delay > 0 {
		d.Delay, d.outcome, d.mark = op.Delay, outcomeDelayed, op.Mark
	}
	if shadow {
		if !op.Allowed {
			d.Allowed, d.Shadow, d.outcome = true, true, outcomeShadowDenied
		}
		d.figures = l.shadowHeaders
	}
}

// setResults records a store's results for rs in d and sums them up: the
// policy closest to denying, or the one that holds the request back
// longest.
func setResults(d *Decision, rs *ruleSet, allowed bool, results []Result) {
	d.rules, d.n, d.figures, d.Allowed = rs, len(results), true, allowed
	d.outcome = outcomeAllowed
	if !allowed {
		d.outcome = outcomeDenied
	}
	if len(results) > inlinePolicies {
		d.more = append(d.more[:0], results...)
	} else {
		copy(d.results[:], results)
	}
	best := 0
	for i := range results {
		r, b := &results[i], &results[best]
		if allowed {
			if r.Remaining < b.Remaining {
				best = i
			}
		} else if r.RetryAfter > b.RetryAfter || b.Allowed && !r.Allowed {
			best = i
		}
	}
	r := &results[best]
	d.Policy, d.policyIndex = rs.policies[best].Name, best
	d.Remaining, d.ResetAfter, d.RetryAfter = r.Remaining, r.ResetAfter, 0
	if !allowed {
		for i := range results {
			d.RetryAfter = max(d.RetryAfter, results[i].RetryAfter)
		}
	}
}

// failOver decides when the store or the resolver failed: through the
// fallback store if there is one and the plan is known (cp and op are set),
// else by policy.
func (l *Limiter) failOver(ctx context.Context, d *Decision, cp *compiledPlan, op *storekit.Op, cause error) {
	d.Degraded, d.Err = true, cause
	l.logFailure(ctx, d, cause)
	if op != nil && l.fallback != nil {
		rs, err := l.dividedRules(cp, d)
		if err == nil {
			op.Rules, op.Results, op.Latency, op.Slot = rs.rules, op.Results[:0], 0, nil
			op.Lease, op.LeaseTTL = "", 0
			if len(rs.inFlight) > 0 && !l.fallbackInProcess {
				op.Lease, op.LeaseTTL = newLease(), leaseTTL
			}
			if err = l.fallback.Do(ctx, op); err == nil {
				d.Fallback = true
				l.settle(d, rs, op, l.shadowed(d.Plan))
				return
			}
		}
		d.Err = errors.Join(cause, fmt.Errorf("tollgate: fallback store: %w", err))
	}
	d.Allowed, d.outcome = !l.failClosed, outcomeFailedOpen
	if l.failClosed {
		d.outcome = outcomeFailedClosed
	}
}

// dividedRules returns the rules of d's request as the fallback store
// applies them: every limit divided among the replicas.
func (l *Limiter) dividedRules(cp *compiledPlan, d *Decision) (*ruleSet, error) {
	p := cp.plan
	p.Limit = divideLimit(p.Limit, l.replicas)
	p.Policies = append([]Policy(nil), p.Policies...)
	for i := range p.Policies {
		pol := &p.Policies[i]
		switch {
		case pol.InFlight > 0:
			pol.InFlight = max(pol.InFlight/l.replicas, 1)
		case pol.Quota.IsZero():
			pol.Limit = divideLimit(pol.Limit, l.replicas)
		default:
			pol.Quota.Tokens = max(pol.Quota.Tokens/l.replicas, 1)
		}
	}
	dcp, err := l.divided.get(&p)
	if err != nil {
		return nil, err
	}
	rs := dcp.ruleSet(d.Budget)
	if err := rs.checkCost(d.Cost); err != nil {
		return nil, err
	}
	return rs, nil
}

func divideLimit(lim Limit, n int64) Limit {
	if n <= 1 {
		return lim
	}
	return Limit{Rate: lim.Rate / float64(n), Burst: max(lim.Burst/n, 1)}
}

// resolve finds tenant's compiled plan within the resolver timeout.
func (l *Limiter) resolve(ctx context.Context, tenant string) (*compiledPlan, error) {
	if l.compiledPlans != nil {
		// This package's resolvers honour the bound, and run no code of
		// the application's on this goroutine: lookups run on their own,
		// which turn a panic into an error (safeResolve).
		return l.compiledPlans.resolveCompiled(ctx, tenant, l.resolverTimeout)
	}
	p, err := l.lookups.start(ctx, tenant, l.resolverTimeout, l.resolverTimeout, nil).await(ctx)
	if err != nil {
		return nil, err
	}
	return l.compiled.get(&p)
}

// CheckBudget reports why requests can not draw from the budget called
// name: a name that is not valid, or, for a resolver that knows its plans
// (StaticResolver, SinglePlan), a budget that no plan has a policy for.
// Middleware calls it when it is built with a budget.
func (l *Limiter) CheckBudget(name string) error {
	if l == nil {
		return errNilLimiter
	}
	if !validName(name) {
		return invalidName("budget", name)
	}
	if l.compiledPlans == nil {
		return nil // a typo is logged at the first decision that meets it
	}
	for _, p := range l.compiledPlans.knownPlans() {
		for _, pol := range p.Policies {
			if pol.Budget == name {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: no plan has a policy for the budget %q", ErrInvalidLimit, truncate(name, 80))
}

// Inspect reports tenant's state in every policy of its plan, budgets
// included, and takes nothing: the Decision's Allowed says whether a request
// of cost 1 drawing from no budget would be allowed now, and Policies and
// Results give each policy's figures.
func (l *Limiter) Inspect(ctx context.Context, tenant string) (Decision, error) {
	d := Decision{Tenant: tenant, Cost: 1}
	if l == nil {
		return d, errNilLimiter
	}
	d.Time = l.now()
	op, cp, err := l.tenantOp(ctx, storekit.Inspect, &d)
	if err != nil {
		return d, err
	}
	defer ops.Put(op)
	if err := l.store.Do(ctx, op); err != nil {
		return d, err
	}
	allowed := true
	for _, r := range op.Results[:len(cp.base.rules)] {
		allowed = allowed && r.Allowed
	}
	setResults(&d, cp.all, allowed, op.Results)
	return d, nil
}

// Reset forgets tenant's state in every policy it has or had, budgets
// included: its buckets are full again and its quotas unused, for every
// replica that shares the store.
func (l *Limiter) Reset(ctx context.Context, tenant string) error {
	if l == nil {
		return errNilLimiter
	}
	d := Decision{Tenant: tenant, Cost: 1, Time: l.now()}
	op, _, err := l.tenantOp(ctx, storekit.Reset, &d)
	if err != nil {
		return err
	}
	defer ops.Put(op)
	return l.store.Do(ctx, op)
}

// tenantOp prepares an Op of kind over every rule of tenant's plan.
func (l *Limiter) tenantOp(ctx context.Context, kind storekit.Kind, d *Decision) (*storekit.Op, *compiledPlan, error) {
	if err := checkTenant(d.Tenant); err != nil {
		return nil, nil, err
	}
	cp, err := l.resolve(ctx, d.Tenant)
	if err != nil {
		return nil, nil, fmt.Errorf("tollgate: resolving the plan of tenant %q: %w", d.Tenant, err)
	}
	if !l.noOverrides {
		cp = l.override(ctx, d.Tenant, cp, d.Time)
	}
	d.Plan = cp.plan.Name
	op := ops.Get().(*storekit.Op)
	*op = storekit.Op{Kind: kind, Tenant: d.Tenant, Rules: cp.all.rules, Cost: 1, Now: d.Time, Results: op.Results[:0]}
	return op, cp, nil
}

// StoreStats returns the counters of the Limiter's store, if it keeps any
// (see storekit.Reporter).
func (l *Limiter) StoreStats() (storekit.Stats, bool) {
	if l == nil {
		return storekit.Stats{}, false
	}
	if r, ok := l.store.(storekit.Reporter); ok {
		return r.Stats(), true
	}
	return storekit.Stats{}, false
}

// A clock reads the time of decisions with one read of the monotonic clock
// (time.Since of a reading that has one) instead of the two of time.Now, the
// wall clock's and the monotonic one's: the wall time is an anchor's plus
// the time elapsed since. The anchor is renewed every second, so a step of
// the wall clock shows within a second.
type clock struct {
	anchor atomic.Pointer[time.Time]
}

func (c *clock) init() { c.renew() }

func (c *clock) renew() time.Time {
	now := time.Now()
	c.anchor.Store(&now)
	return now
}

// now returns the current time, with both wall and monotonic readings.
func (c *clock) now() time.Time {
	a := c.anchor.Load()
	if elapsed := time.Since(*a); elapsed < time.Second {
		return a.Add(elapsed)
	}
	return c.renew()
}
