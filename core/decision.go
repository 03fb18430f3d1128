package tollgate

import (
	"errors"
	"fmt"
	"time"
)

// MaxTenantLength is the longest tenant ID a Limiter accepts, in bytes. It
// bounds the memory that caches and logs keyed by tenant can take; a longer
// ID is an error wrapping ErrInvalidTenant, which middleware answers with
// 400 Bad Request.
const MaxTenantLength = 256

// ErrInvalidTenant is wrapped by the error a Limiter returns for a request
// whose tenant ID is empty or longer than MaxTenantLength. It is the
// client's mistake, not the application's.
var ErrInvalidTenant = errors.New("tollgate: invalid tenant")

// A Request is what a Limiter decides on.
type Request struct {
	Tenant string
	Cost   int64 // tokens the request takes from every policy that applies; 0 means 1

	// Budget names the budget the request draws from beside the plan's
	// own limits (a route's, such as "reports"), if any. A plan without
	// a policy for the budget adds no limit for it.
	Budget string

	// Method and Route describe the request in events, logs and metrics.
	// Route should be the router's pattern ("/users/{id}"), never the raw
	// path, so that it does not multiply their cardinality. When Route is
	// "" and RouteFunc is set, the Limiter calls RouteFunc(RouteArg) the
	// first time it needs the route, which spares routers that must search
	// their tree for it (chi) the work on requests no event reports.
	Method    string
	Route     string
	RouteFunc func(arg any) string
	RouteArg  any
}

// route returns the request's route, working it out if needed.
func (req *Request) route() string {
	if req.Route == "" && req.RouteFunc != nil {
		req.Route = req.RouteFunc(req.RouteArg)
	}
	return req.Route
}

// checkTenant reports why tenant can not be limited, or nil.
func checkTenant(tenant string) error {
	switch {
	case tenant == "":
		return fmt.Errorf("%w: the tenant is empty", ErrInvalidTenant)
	case len(tenant) > MaxTenantLength:
		return fmt.Errorf("%w: the tenant ID is %d bytes long; at most %d are allowed", ErrInvalidTenant, len(tenant), MaxTenantLength)
	}
	return nil
}

// A Decision is a Limiter's answer to one Request.
//
// Remaining, RetryAfter and ResetAfter describe the policy closest to
// denying the request, named by Policy: on a denial, the one that holds it
// back longest; otherwise the one with the fewest tokens left. RetryAfter
// is then the time until every policy would allow the request. Policies and
// Results give the figures of every policy that applied.
type Decision struct {
	Allowed bool
	Tenant  string
	Plan    Plan
	Cost    int64
	Budget  string

	Policy     string        // the policy the figures below describe
	Remaining  int64         // whole tokens left
	RetryAfter time.Duration // > 0 only when denied: until every policy allows the request
	ResetAfter time.Duration // until the policy is full again
	Time       time.Time     // when the decision was made

	// Degraded reports that the Store or the PlanResolver failed and the
	// failure policy decided; Err holds the failure. A degraded decision
	// carries figures only if a fallback store made it.
	Degraded bool
	Err      error

	rules   *ruleSet
	n       int // policies that applied
	results [inlinePolicies]Result
	more    []Result // the results past inlinePolicies, for large plans
	figures bool
}

// inlinePolicies is how many policies' results a Decision holds without an
// allocation; plans rarely have more.
const inlinePolicies = 4

// HasFigures reports whether the decision's figures come from a store, so
// that rate-limit headers would tell the truth. A fail-open or fail-closed
// decision has none.
func (d *Decision) HasFigures() bool { return d.figures }

// Policies returns the policies that applied to the request, the plan's
// Limit first (named after the plan), each with its name filled in. The
// slice is shared and must not be modified.
func (d *Decision) Policies() []Policy {
	if !d.figures || d.rules == nil {
		return nil
	}
	return d.rules.policies
}

// Results returns the result of each policy of Policies, in the same
// order.
func (d *Decision) Results() []Result {
	if !d.figures {
		return nil
	}
	if d.n > inlinePolicies {
		return d.more
	}
	return d.results[:d.n]
}

// setResults records the store's results for rs and sums them up.
func (d *Decision) setResults(rs *ruleSet, allowed bool, results []Result) {
	d.rules, d.n, d.figures, d.Allowed = rs, len(results), true, allowed
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
	r := results[best]
	d.Policy = rs.policies[best].Name
	d.Remaining = r.Remaining
	d.ResetAfter = r.ResetAfter
	d.RetryAfter = 0
	if !allowed {
		for i := range results {
			d.RetryAfter = max(d.RetryAfter, results[i].RetryAfter)
		}
	}
}
