package tollgate

import (
	"context"
	"errors"
	"fmt"
	"sync"
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

	mu      sync.RWMutex
	tenants map[string]string
}

// NewStaticResolver returns a StaticResolver over plans, giving defaultPlan
// to tenants that have no assignment and assigning tenants as given
// (tenant -> plan name). Every plan must be valid and every name used must be
// one of plans.
func NewStaticResolver(plans []Plan, defaultPlan string, tenants map[string]string) (*StaticResolver, error) {
	r := &StaticResolver{plans: make(map[string]Plan, len(plans)), tenants: make(map[string]string, len(tenants))}
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
	for tenant, name := range tenants {
		if err := r.Assign(tenant, name); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Assign puts tenant on the named plan from its next request on.
func (r *StaticResolver) Assign(tenant, plan string) error {
	if _, ok := r.plans[plan]; !ok {
		return fmt.Errorf("%w: tenant %q assigned to %q", ErrUnknownPlan, tenant, plan)
	}
	r.mu.Lock()
	r.tenants[tenant] = plan
	r.mu.Unlock()
	return nil
}

// Unassign puts tenant back on the default plan.
func (r *StaticResolver) Unassign(tenant string) {
	r.mu.Lock()
	delete(r.tenants, tenant)
	r.mu.Unlock()
}

// Plan returns the plan called name and whether there is one.
func (r *StaticResolver) Plan(name string) (Plan, bool) {
	p, ok := r.plans[name]
	return p, ok
}

// ResolvePlan returns the plan assigned to tenant, or the default plan. It
// never fails.
func (r *StaticResolver) ResolvePlan(_ context.Context, tenant string) (Plan, error) {
	r.mu.RLock()
	name, ok := r.tenants[tenant]
	r.mu.RUnlock()
	if !ok {
		return r.fallback, nil
	}
	return r.plans[name], nil
}

// SinglePlan returns a PlanResolver that gives every tenant plan p.
func SinglePlan(p Plan) PlanResolver {
	return PlanResolverFunc(func(context.Context, string) (Plan, error) { return p, nil })
}
