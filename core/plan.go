package tollgate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// A Plan is a named subscription tier and the limits its tenants get: a
// token bucket (Limit) that every request draws from, and optionally more
// Policies, such as a daily quota or a budget of its own for report exports.
//
// A request is allowed only if every policy that applies to it allows it,
// and a denied request takes from none of them.
type Plan struct {
	// Name identifies the plan in headers, logs and metrics. It must be
	// 1 to MaxNameLength characters from the set that ValidName accepts.
	Name string

	// Limit is the plan's token bucket, which every request of its
	// tenants draws from. In headers it is the policy named Name.
	Limit Limit

	// Policies are the plan's further limits; most plans have none.
	Policies []Policy
}

// A Policy is one limit of a Plan beyond its Limit: a token bucket (Limit)
// or a calendar quota (Quota); exactly one of the two is set. Without a
// Budget it applies to every request of the plan's tenants, like
// Plan.Limit; with one, only to requests that draw from that budget (a
// route declares its budget in the middleware), so that, say, report
// exports get 30 an hour on one plan and 300 on another.
//
// A tenant's state for a policy is kept per tenant and budget, and for a
// quota per calendar period, not per plan: a tenant moved to another plan
// keeps what it used in the current period.
type Policy struct {
	// Name identifies the policy in headers, logs and metrics. Empty, it
	// is derived from the plan: "<plan>-daily" or "<plan>-monthly" for a
	// quota, "<plan>-<budget>" for a budget's bucket, and
	// "<plan>-<budget>-daily" (or monthly) for a budget's quota. A
	// token bucket without a budget must be named.
	Name string

	Limit Limit // a token bucket, or
	Quota Quota // a calendar quota

	// Budget, if set, limits the policy to requests that draw from the
	// budget of that name. Names follow the rules of ValidName.
	Budget string
}

// MaxNameLength is the longest plan, policy or budget name: names are sent to
// clients in the RateLimit and RateLimit-Policy headers.
const MaxNameLength = 64

// maxPolicies bounds the policies of a plan, and with it the work and the
// header size of every request.
const maxPolicies = 16

// ValidName reports whether s may name a plan, a policy or a budget: 1 to
// MaxNameLength characters, each an ASCII letter or digit or one of
// "-_.:/+". The set needs no escaping in headers, logs or Redis keys.
func ValidName(s string) bool {
	if s == "" || len(s) > MaxNameLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-', c == '_', c == '.', c == ':', c == '/', c == '+':
		default:
			return false
		}
	}
	return true
}

// DefaultPlans returns the default plans, the seed figures of the examples:
// free (burst 20 at 2/s), startup (100 at 10/s), growth (500 at 50/s) and
// enterprise (2000 at 200/s). Applications usually define their own.
func DefaultPlans() []Plan {
	return []Plan{
		{Name: "free", Limit: Limit{Rate: 2, Burst: 20}},
		{Name: "startup", Limit: Limit{Rate: 10, Burst: 100}},
		{Name: "growth", Limit: Limit{Rate: 50, Burst: 500}},
		{Name: "enterprise", Limit: Limit{Rate: 200, Burst: 2000}},
	}
}

// Validate reports why p can not be used, naming the field at fault, or nil.
func (p Plan) Validate() error {
	_, err := compile(p)
	return err
}

func invalidName(what, name string) error {
	return fmt.Errorf("%w: %s must be 1 to %d letters, digits or \"-_.:/+\", got %q",
		ErrInvalidLimit, what, MaxNameLength, truncate(name, 80))
}

// truncate shortens s for an error message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// A PlanResolver finds the plan of a tenant. It is called on every request,
// so a resolver backed by a database should be wrapped in a CachingResolver.
// An error makes the Limiter apply its failure policy, and so does a panic,
// which the Limiter recovers, or a resolver that overruns the Limiter's
// resolver timeout (see WithResolverTimeout).
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
// take effect on the tenant's next request. It never blocks and is safe for
// concurrent use. The zero StaticResolver is not usable; call
// NewStaticResolver.
type StaticResolver struct {
	// The plans are compiled once, here, so that a Limiter's decisions
	// get the compiled plan straight from the resolver (compiledResolver)
	// and skip its plan cache.
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
// (tenant -> plan name). Every plan must be valid and every name used must be
// one of plans.
func NewStaticResolver(plans []Plan, defaultPlan string, tenants map[string]string) (*StaticResolver, error) {
	r := &StaticResolver{plans: make(map[string]*compiledPlan, len(plans))}
	for _, p := range plans {
		p.Policies = slices.Clone(p.Policies) // as in SinglePlan
		cp, err := compile(p)
		if err != nil {
			return nil, err
		}
		if _, dup := r.plans[p.Name]; dup {
			return nil, fmt.Errorf("%w: Plan.Name %q is used twice", ErrInvalidLimit, p.Name)
		}
		r.plans[p.Name] = cp
		r.order = append(r.order, p)
	}
	fallback, ok := r.plans[defaultPlan]
	if !ok {
		return nil, fmt.Errorf("%w: default plan %q is not one of the plans", ErrUnknownPlan, truncate(defaultPlan, 80))
	}
	r.fallback = fallback
	assigned := make(map[string]*compiledPlan, len(tenants))
	for tenant, name := range tenants {
		p, ok := r.plans[name]
		if !ok {
			return nil, fmt.Errorf("%w: tenant %q assigned to %q", ErrUnknownPlan, truncate(tenant, 80), truncate(name, 80))
		}
		assigned[tenant] = p
	}
	r.tenants.Store(&assigned)
	return r, nil
}

// update replaces the assignments with a copy changed by edit.
func (r *StaticResolver) update(edit func(map[string]*compiledPlan)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := *r.tenants.Load()
	next := make(map[string]*compiledPlan, len(old)+1)
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
		return fmt.Errorf("%w: tenant %q assigned to %q", ErrUnknownPlan, truncate(tenant, 80), truncate(plan, 80))
	}
	r.update(func(m map[string]*compiledPlan) { m[tenant] = p })
	return nil
}

// Unassign puts tenant back on the default plan.
func (r *StaticResolver) Unassign(tenant string) {
	r.update(func(m map[string]*compiledPlan) { delete(m, tenant) })
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
func (r *StaticResolver) Plans() []Plan {
	return append([]Plan(nil), r.order...)
}

// ResolvePlan returns the plan assigned to tenant, or the default plan. It
// never fails.
func (r *StaticResolver) ResolvePlan(_ context.Context, tenant string) (Plan, error) {
	return r.resolveCompiled(tenant).plan, nil
}

// resolveCompiled returns the compiled plan of tenant; it implements
// compiledResolver.
func (r *StaticResolver) resolveCompiled(tenant string) *compiledPlan {
	if cp, ok := (*r.tenants.Load())[tenant]; ok {
		return cp
	}
	return r.fallback
}

func (r *StaticResolver) resolveWithin(ctx context.Context, tenant string, _ time.Duration) (Plan, error) {
	return r.ResolvePlan(ctx, tenant)
}

// SinglePlan returns a PlanResolver that gives every tenant plan p.
func SinglePlan(p Plan) PlanResolver {
	// A copy of the policies, so that the caller's slice changing later
	// cannot change the plan under its compiled form.
	p.Policies = slices.Clone(p.Policies)
	cp, _ := compile(p) // nil if p is invalid: New reports why
	return singlePlan{p, cp}
}

type singlePlan struct {
	p  Plan
	cp *compiledPlan
}

func (s singlePlan) ResolvePlan(context.Context, string) (Plan, error) { return s.p, nil }
func (s singlePlan) resolveWithin(context.Context, string, time.Duration) (Plan, error) {
	return s.p, nil
}
func (s singlePlan) resolveCompiled(string) *compiledPlan { return s.cp }
