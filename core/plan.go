package tollgate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// A Plan is a named subscription tier and the Limit its tenants get.
type Plan struct {
	Name  string
	Limit Limit
}

// The default plans. Applications usually define their own; these are the
// seed figures of the examples.
var (
	Free       = Plan{Name: "free", Limit: Limit{Rate: 2, Burst: 20}}
	Startup    = Plan{Name: "startup", Limit: Limit{Rate: 10, Burst: 100}}
	Growth     = Plan{Name: "growth", Limit: Limit{Rate: 50, Burst: 500}}
	Enterprise = Plan{Name: "enterprise", Limit: Limit{Rate: 200, Burst: 2000}}
)

// DefaultPlans returns Free, Startup, Growth and Enterprise.
func DefaultPlans() []Plan {
	return []Plan{Free, Startup, Growth, Enterprise}
}

// Validate reports why p can not be used, naming the field at fault, or nil.
// A name must be 1 to 64 printable ASCII characters, since it is sent to
// clients in the RateLimit and RateLimit-Policy headers.
func (p Plan) Validate() error {
	if p.Name == "" || len(p.Name) > 64 {
		return fmt.Errorf("%w: Plan.Name must be 1 to 64 characters, got %q", ErrInvalidLimit, p.Name)
	}
	for i := 0; i < len(p.Name); i++ {
		if c := p.Name[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("%w: Plan.Name must be printable ASCII, got %q", ErrInvalidLimit, p.Name)
		}
	}
	if err := p.Limit.Validate(); err != nil {
		return fmt.Errorf("plan %q: %w", p.Name, err)
	}
	return nil
}

// A PlanResolver finds the plan of a tenant. It is called on every request,
// so a resolver backed by a database should be wrapped in a CachingResolver.
// An error makes the Limiter apply its failure policy.
type PlanResolver interface {
	ResolvePlan(ctx context.Context, tenant string) (Plan, error)
}

// PlanResolverFunc adapts a function to a PlanResolver.
type PlanResolverFunc func(ctx context.Context, tenant string) (Plan, error)

// ResolvePlan returns f(ctx, tenant).
func (f PlanResolverFunc) ResolvePlan(ctx context.Context, tenant string) (Plan, error) {
	return f(ctx, tenant)
}

// ErrUnknownPlan is wrapped by errors that name a plan no resolver knows.
var ErrUnknownPlan = errors.New("tollgate: unknown plan")

// A StaticResolver maps tenants to plans by name, with a default plan for
// every other tenant. Assignments can change at run time with Assign and
// take effect on the tenant's next request. It is safe for concurrent use.
type StaticResolver struct {
	plans    map[string]Plan
	fallback Plan

	// Assignments are copied on write: reads, one per request, take no
	// lock and so never contend across cores.
	mu      sync.Mutex // serialises writers
	tenants atomic.Pointer[map[string]Plan]
}

// NewStaticResolver returns a StaticResolver over plans, giving defaultPlan
// to tenants that have no assignment and assigning tenants as given
// (tenant -> plan name). Every plan must be valid and every name used must be
// one of plans.
func NewStaticResolver(plans []Plan, defaultPlan string, tenants map[string]string) (*StaticResolver, error) {
	r := &StaticResolver{plans: make(map[string]Plan, len(plans))}
	r.tenants.Store(&map[string]Plan{})
	for _, p := range plans {
		if err := p.Validate(); err != nil {
			return nil, err
		}
		if _, dup := r.plans[p.Name]; dup {
			return nil, fmt.Errorf("%w: Plan.Name %q is used twice", ErrInvalidLimit, p.Name)
		}
		r.plans[p.Name] = p
	}
	fallback, ok := r.plans[defaultPlan]
	if !ok {
		return nil, fmt.Errorf("%w: default plan %q is not one of the plans", ErrUnknownPlan, defaultPlan)
	}
	r.fallback = fallback
	assigned := make(map[string]Plan, len(tenants))
	for tenant, name := range tenants {
		p, ok := r.plans[name]
		if !ok {
			return nil, fmt.Errorf("%w: tenant %q assigned to %q", ErrUnknownPlan, tenant, name)
		}
		assigned[tenant] = p
	}
	r.tenants.Store(&assigned)
	return r, nil
}

// update replaces the assignments with a copy changed by edit.
func (r *StaticResolver) update(edit func(map[string]Plan)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := *r.tenants.Load()
	next := make(map[string]Plan, len(old)+1)
	for t, p := range old {
		next[t] = p
	}
	edit(next)
	r.tenants.Store(&next)
}

// Assign puts tenant on the named plan from its next request on. Each call
// copies the assignments, so it suits tenants counted in thousands, changing
// now and then; for more, back a CachingResolver with the application's
// database.
func (r *StaticResolver) Assign(tenant, plan string) error {
	p, ok := r.plans[plan]
	if !ok {
		return fmt.Errorf("%w: tenant %q assigned to %q", ErrUnknownPlan, tenant, plan)
	}
	r.update(func(m map[string]Plan) { m[tenant] = p })
	return nil
}

// Unassign puts tenant back on the default plan.
func (r *StaticResolver) Unassign(tenant string) {
	r.update(func(m map[string]Plan) { delete(m, tenant) })
}

// Plan returns the plan called name and whether there is one.
func (r *StaticResolver) Plan(name string) (Plan, bool) {
	p, ok := r.plans[name]
	return p, ok
}

// ResolvePlan returns the plan assigned to tenant, or the default plan. It
// never fails.
func (r *StaticResolver) ResolvePlan(_ context.Context, tenant string) (Plan, error) {
	if p, ok := (*r.tenants.Load())[tenant]; ok {
		return p, nil
	}
	return r.fallback, nil
}

// SinglePlan returns a PlanResolver that gives every tenant plan p.
func SinglePlan(p Plan) PlanResolver {
	return PlanResolverFunc(func(context.Context, string) (Plan, error) { return p, nil })
}
