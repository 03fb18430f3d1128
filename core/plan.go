package tollgate

import (
	"errors"
	"fmt"
)

// A Plan is a named subscription tier and the limits its tenants get: a
// token bucket (Limit) that every request draws from, and optionally more
// Policies, such as a daily quota or a budget of its own for report exports.
//
// A request is allowed only if every policy that applies to it allows it,
// and a denied request takes from none of them.
type Plan struct {
	// Name identifies the plan in headers, logs and metrics: 1 to 64
	// ASCII letters, digits or "-_.:/+", which need no escaping in
	// headers, logs or Redis keys.
	Name string

	// Limit is the plan's token bucket, which every request of its
	// tenants draws from. In headers it is the policy named Name.
	Limit Limit

	// Policies are the plan's further limits; most plans have none. A
	// plan has at most 16.
	Policies []Policy
}

// A Policy is one limit of a Plan beyond its Limit: a token bucket (Limit),
// a calendar quota (Quota) or a cap on requests in flight (InFlight);
// exactly one of them is set. Without a
// Budget it applies to every request of the plan's tenants, like
// Plan.Limit; with one, only to requests that draw from that budget (a
// route declares its budget in the middleware), so that, say, report
// exports get 30 an hour on one plan and 300 on another.
//
// A tenant's state for a policy is kept per tenant and budget, not per
// plan: a tenant moved to another plan keeps what it used.
type Policy struct {
	// Name identifies the policy in headers, logs and metrics. Empty, it
	// is derived from the plan: "<plan>-daily" or "<plan>-monthly" for a
	// quota, "<plan>-inflight" for a cap in flight, "<plan>-<budget>" for
	// a budget's bucket, and "<plan>-<budget>-daily" (or monthly, or
	// inflight) for a budget's other policies. A token bucket without a
	// budget must be named.
	Name string

	Limit Limit // a token bucket, or
	Quota Quota // a calendar quota, or

	// InFlight caps the requests of a tenant that run at once, across
	// every replica that shares the store: a request holds a slot, whatever
	// its cost, from the decision until the application releases it
	// (Limiter.Release; middleware does when the handler returns). In a
	// store shared by replicas, a slot of a process that died frees
	// itself within 10 seconds.
	InFlight int64

	// Budget, if set, limits the policy to requests that draw from the
	// budget of that name. Names follow the rules of Plan.Name.
	Budget string
}

const (
	maxNameLength = 64
	maxPolicies   = 16
	maxInFlight   = 1_000_000
)

// ErrUnknownPlan is wrapped by errors that name a plan the resolver does not
// have.
var ErrUnknownPlan = errors.New("tollgate: unknown plan")

// validName reports whether s may name a plan, a policy or a budget.
func validName(s string) bool {
	if s == "" || len(s) > maxNameLength {
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

func invalidName(what, name string) error {
	return fmt.Errorf("%w: %s must be 1 to %d letters, digits or \"-_.:/+\", got %q",
		ErrInvalidLimit, what, maxNameLength, truncate(name, 80))
}

// truncate shortens s for an error or log message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
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

// equal reports whether p and o are the same plan, field by field, with
// quota locations compared by name.
func (p *Plan) equal(o *Plan) bool {
	if p.Name != o.Name || p.Limit != o.Limit || len(p.Policies) != len(o.Policies) {
		return false
	}
	for i := range p.Policies {
		a, b := &p.Policies[i], &o.Policies[i]
		if a.Name != b.Name || a.Limit != b.Limit || a.InFlight != b.InFlight || a.Budget != b.Budget || !a.Quota.equal(b.Quota) {
			return false
		}
	}
	return true
}
