package tollgate

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// A PlanResolver finds the plan of a tenant. A Limiter asks it on every
// request, so a resolver backed by a database belongs behind a
// CachingResolver. An error makes the Limiter apply its failure policy, and
// so does a panic, which the Limiter recovers, or a lookup that runs past the
// Limiter's resolver timeout (see WithResolverTimeout).
type PlanResolver interface {
	ResolvePlan(ctx context.Context, tenant string) (Plan, error)
}

// PlanResolverFunc adapts a function to a PlanResolver.
type PlanResolverFunc func(ctx context.Context, tenant string) (Plan, error)

// ResolvePlan returns f(ctx, tenant).
func (f PlanResolverFunc) ResolvePlan(ctx context.Context, tenant string) (Plan, error) {
	return f(ctx, tenant)
}

// A compiledResolver is a resolver of this package: it hands out compiled
// plans, and never blocks a request past the bound it is given, so the
// Limiter calls it on the request's goroutine.
type compiledResolver interface {
	resolveCompiled(ctx context.Context, tenant string, bound time.Duration) (*compiledPlan, error)

	// knownPlans returns every plan the resolver can give, or nil if it
	// can not tell; New checks names of plans and budgets against them.
	knownPlans() []Plan

	// compiledPlan returns the plan called name, or nil if the resolver
	// has none or can not tell.
	compiledPlan(name string) *compiledPlan
}

// SinglePlan returns a PlanResolver that gives every tenant plan p. New
// reports an invalid p.
func SinglePlan(p Plan) PlanResolver {
	cp, err := compile(p)
	return singlePlan{cp, err}
}

type singlePlan struct {
	cp  *compiledPlan
	err error
}

func (s singlePlan) ResolvePlan(context.Context, string) (Plan, error) {
	if s.err != nil {
		return Plan{}, s.err
	}
	return s.cp.plan, nil
}

func (s singlePlan) resolveCompiled(context.Context, string, time.Duration) (*compiledPlan, error) {
	return s.cp, s.err
}

func (s singlePlan) compiledPlan(name string) *compiledPlan {
	if s.err != nil || s.cp.plan.Name != name {
		return nil
	}
	return s.cp
}

func (s singlePlan) knownPlans() []Plan {
	if s.err != nil {
		return nil
	}
	return []Plan{s.cp.plan}
}

// A StaticResolver maps tenants to plans by name, with a default plan for
// every other tenant. Assignments can change at run time with Assign and
// Unassign, and take effect on the tenant's next request. It never blocks
// and is safe for concurrent use. The zero StaticResolver is not usable;
// call NewStaticResolver.
type StaticResolver struct {
	plans    map[string]*compiledPlan
	order    []Plan
	fallback *compiledPlan

	// Assignments are copied on write: reads, one per request, take no
	// lock and so never contend across cores.
	mu      sync.Mutex // serialises writers
	tenants atomic.Pointer[map[string]*compiledPlan]
}

// NewStaticResolver returns a StaticResolver over plans, giving defaultPlan
// to tenants that have no assignment and assigning tenants as given
// (tenant -> plan name). Every plan must be valid, with a name of its own,
// and every name used must be one of plans.
func NewStaticResolver(plans []Plan, defaultPlan string, tenants map[string]string) (*StaticResolver, error) {
	r := &StaticResolver{plans: make(map[string]*compiledPlan, len(plans))}
	for i, p := range plans {
		cp, err := compile(p)
		if err != nil {
			return nil, fmt.Errorf("plans[%d]: %w", i, err)
		}
		if _, dup := r.plans[p.Name]; dup {
			return nil, fmt.Errorf("%w: plans[%d]: Name %q is used twice", ErrInvalidLimit, i, p.Name)
		}
		r.plans[p.Name] = cp
		r.order = append(r.order, cp.plan)
	}
	fallback, ok := r.plans[defaultPlan]
	if !ok {
		return nil, fmt.Errorf("%w: the default plan %q is not one of the plans", ErrUnknownPlan, truncate(defaultPlan, 80))
	}
	r.fallback = fallback
	assigned := make(map[string]*compiledPlan, len(tenants))
	for tenant, name := range tenants {
		p, ok := r.plans[name]
		if !ok {
			return nil, fmt.Errorf("%w: tenant %q is assigned to %q", ErrUnknownPlan, truncate(tenant, 80), truncate(name, 80))
		}
		assigned[tenant] = p
	}
	r.tenants.Store(&assigned)
	return r, nil
}

// Assign puts tenant on the named plan from its next request on. Each call
// copies the assignments, so it suits tenants counted in thousands, changing
// now and then; for more, back a CachingResolver with the application's
// database.
func (r *StaticResolver) Assign(tenant, plan string) error {
	p, ok := r.plans[plan]
	if !ok {
		return fmt.Errorf("%w: tenant %q assigned to %q", ErrUnknownPlan, truncate(tenant, 80), truncate(plan, 80))
	}
	r.update(func(m map[string]*compiledPlan) { m[tenant] = p })
	return nil
}

// Unassign puts tenant back on the default plan.
func (r *StaticResolver) Unassign(tenant string) {
	r.update(func(m map[string]*compiledPlan) { delete(m, tenant) })
}

func (r *StaticResolver) update(edit func(map[string]*compiledPlan)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	next := make(map[string]*compiledPlan, len(*r.tenants.Load())+1)
	for t, p := range *r.tenants.Load() {
		next[t] = p
	}
	edit(next)
	r.tenants.Store(&next)
}

// Plan returns the plan called name and whether there is one.
func (r *StaticResolver) Plan(name string) (Plan, bool) {
	if cp, ok := r.plans[name]; ok {
		return cp.plan, true
	}
	return Plan{}, false
}

// Plans returns the resolver's plans, in the order NewStaticResolver got
// them.
func (r *StaticResolver) Plans() []Plan { return slices.Clone(r.order) }

// ResolvePlan returns the plan assigned to tenant, or the default plan. It
// never fails.
func (r *StaticResolver) ResolvePlan(_ context.Context, tenant string) (Plan, error) {
	return r.compiledFor(tenant).plan, nil
}

func (r *StaticResolver) compiledFor(tenant string) *compiledPlan {
	if cp, ok := (*r.tenants.Load())[tenant]; ok {
		return cp
	}
	return r.fallback
}

func (r *StaticResolver) resolveCompiled(_ context.Context, tenant string, _ time.Duration) (*compiledPlan, error) {
	return r.compiledFor(tenant), nil
}

func (r *StaticResolver) knownPlans() []Plan { return r.order }

func (r *StaticResolver) compiledPlan(name string) *compiledPlan { return r.plans[name] }

// errResolverTimeout is the failure of a lookup that ran past its bound.
var errResolverTimeout = errors.New("tollgate: the plan resolver did not answer in time")

// maxStuckLookups bounds the goroutines that lookups ignoring their context
// leave behind, per flightGroup; past it, a new lookup fails at once.
const maxStuckLookups = 64

// A flightGroup looks plans up through a resolver that may block, or ignore
// its context: one lookup per tenant at a time, on a goroutine of its own,
// shared by every request that waits for it. Bounds count from when the
// lookup starts running, so that a CPU too busy to run it is not taken for
// a failing resolver.
type flightGroup struct {
	resolve func(ctx context.Context, tenant string) (Plan, error)
	// done, if set, is told of every lookup that ended while it was still
	// the tenant's current one (see forget), before its waiters are.
	done func(tenant string, p Plan, err error)

	mu      sync.Mutex
	flights map[string]*flight
	stuck   atomic.Int64
}

// A flight is one lookup.
type flight struct {
	answered chan struct{} // closed once plan and err are set
	expired  chan struct{} // closed when waiters stop waiting
	once     sync.Once
	plan     Plan
	err      error
}

// errTooManyStuck fails lookups while maxStuckLookups are stuck.
var errTooManyStuck = fmt.Errorf("tollgate: %d plan lookups are stuck in the resolver; not starting another", maxStuckLookups)

// start returns tenant's lookup under way, or starts one whose waiters give
// up wait after it starts running and which is abandoned, counted as stuck,
// after abandon. It returns nil, starting none, if learned (when not nil)
// reports that done has learned tenant's plan since the caller looked: a
// lookup that ended just now, which finish takes out of the flights only
// after done.
func (g *flightGroup) start(ctx context.Context, tenant string, wait, abandon time.Duration, learned func(tenant string) bool) *flight {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f := g.flights[tenant]; f != nil {
		return f
	}
	if learned != nil && learned(tenant) {
		return nil
	}
	f := &flight{answered: make(chan struct{}), expired: make(chan struct{})}
	if g.stuck.Load() >= maxStuckLookups {
		f.plan, f.err = Plan{}, errTooManyStuck
		close(f.answered)
		return f
	}
	if g.flights == nil {
		g.flights = make(map[string]*flight)
	}
	g.flights[tenant] = f
	go g.run(context.WithoutCancel(ctx), tenant, f, wait, abandon)
	return f
}

func (g *flightGroup) run(ctx context.Context, tenant string, f *flight, wait, abandon time.Duration) {
	if wait < abandon {
		expire := time.AfterFunc(wait, func() { close(f.expired) })
		defer expire.Stop()
	}
	ctx, cancel := context.WithTimeout(ctx, abandon)
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		if ctx.Err() == context.DeadlineExceeded {
			g.finish(tenant, f, Plan{}, fmt.Errorf("%w (within %v)", errResolverTimeout, abandon), func() { g.stuck.Add(1) })
		}
	})
	p, err := safeResolve(ctx, g.resolve, tenant)
	stop()
	if !g.finish(tenant, f, p, err, nil) {
		g.stuck.Add(-1) // it was abandoned, and counted, before it returned
	}
}

// finish answers f with p and err, and reports whether it did: f may have
// been answered (abandoned) before. done learns of the answer, and f leaves
// the flights under way, before its waiters get the answer, so that one
// that asks again finds it cached and never the finished flight.
func (g *flightGroup) finish(tenant string, f *flight, p Plan, err error, also func()) bool {
	answered := false
	f.once.Do(func() {
		g.mu.Lock()
		current := g.flights[tenant] == f
		g.mu.Unlock()
		if current && g.done != nil {
			g.done(tenant, p, err)
		}
		g.mu.Lock()
		if g.flights[tenant] == f {
			delete(g.flights, tenant)
		}
		g.mu.Unlock()
		f.plan, f.err, answered = p, err, true
		if also != nil {
			also()
		}
		close(f.answered)
	})
	return answered
}

// forget orphans tenant's lookup under way: its answer still reaches its
// waiters, but done is not told of it.
func (g *flightGroup) forget(tenant string) {
	g.mu.Lock()
	delete(g.flights, tenant)
	g.mu.Unlock()
}

// await waits for f until it is answered, its waiters' bound passes, or ctx
// ends.
func (f *flight) await(ctx context.Context) (Plan, error) {
	select {
	case <-f.answered:
		return f.plan, f.err
	case <-f.expired:
		select {
		case <-f.answered: // answered as the bound passed
			return f.plan, f.err
		default:
		}
		return Plan{}, errResolverTimeout
	case <-ctx.Done():
		return Plan{}, ctx.Err()
	}
}

// safeResolve calls resolve and returns a panic in it as an error, with the
// stack, so that a faulty resolver fails a decision, not the process.
func safeResolve(ctx context.Context, resolve func(context.Context, string) (Plan, error), tenant string) (p Plan, err error) {
	defer func() {
		if v := recover(); v != nil {
			p, err = Plan{}, fmt.Errorf("tollgate: the plan resolver panicked: %v\n%s", v, debug.Stack())
		}
	}()
	return resolve(ctx, tenant)
}
