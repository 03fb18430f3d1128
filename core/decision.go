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

	// MaxDelay is how long the caller is willing to wait for its tokens.
	// With MaxDelay > 0 a token bucket short of tokens may reserve them
	// for up to MaxDelay from now instead of denying: the Decision is then
	// allowed with a Delay, and the caller must wait that long before it
	// proceeds (or give the tokens back with Limiter.Cancel). Reservations
	// are granted in order of arrival across every replica that shares
	// the store, so waiting callers never exceed the rate. A quota never
	// reserves. Limiter.Wait sets MaxDelay from its context.
	MaxDelay time.Duration

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

	// Outcome says how the decision ended; it is the value metrics
	// count.
	Outcome Outcome

	// Delay is how long the caller must wait before it proceeds: > 0 only
	// for a request with MaxDelay whose tokens were reserved.
	Delay time.Duration

	// Shadow reports that a policy denied the request but its plan is in
	// shadow mode (WithShadow): Allowed is true, the denial counted.
	Shadow bool

	// Degraded reports that the Store or the PlanResolver failed and the
	// failure policy decided; Err holds the failure. A degraded decision
	// carries figures only if a fallback store made it, which Fallback
	// reports.
	Degraded bool
	Fallback bool
	Err      error

	rules   *ruleSet
	n       int // policies that applied
	results [inlinePolicies]Result
	more    []Result // the results past inlinePolicies, for large plans
	marks   [inlinePolicies]int64
	mores   []int64 // the marks past inlinePolicies
	figures bool    // the figures may be shown to the client

	policyIndex int // of Policy, in Policies
}

// inlinePolicies is how many policies' results a Decision holds without an
// allocation; plans rarely have more.
const inlinePolicies = 4

// HasFigures reports whether the decision's figures come from a store and
// may be shown to the client, so that rate-limit headers would tell the
// truth: not for a fail-open or fail-closed decision, nor in shadow mode
// unless WithShadowHeaders says so.
func (d *Decision) HasFigures() bool { return d.figures }

// Policies returns the policies that applied to the request, the plan's
// Limit first (named after the plan), each with its name filled in; nil if
// no store decided. The slice is shared and must not be modified.
func (d *Decision) Policies() []Policy {
	if d.rules == nil {
		return nil
	}
	return d.rules.policies
}

// Results returns the result of each policy of Policies, in the same
// order.
func (d *Decision) Results() []Result {
	if d.rules == nil {
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
	d.Outcome = OutcomeAllowed
	if !allowed {
		d.Outcome = OutcomeDenied
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
	r := results[best]
	d.Policy, d.policyIndex = rs.policies[best].Name, best
	d.Remaining = r.Remaining
	d.ResetAfter = r.ResetAfter
	d.RetryAfter = 0
	if !allowed {
		for i := range results {
			d.RetryAfter = max(d.RetryAfter, results[i].RetryAfter)
		}
	}
}

// setMarks keeps what Cancel needs to give a reservation back.
func (d *Decision) setMarks(marks []int64) {
	if len(marks) > inlinePolicies {
		d.mores = append(d.mores[:0], marks...)
	} else {
		copy(d.marks[:], marks)
	}
}

func (d *Decision) reservedMarks() []int64 {
	if d.n > inlinePolicies {
		return d.mores
	}
	return d.marks[:d.n]
}

// waited moves d to the end of its delay, so that its figures describe the
// state the caller proceeds in.
func (d *Decision) waited() {
	delay := d.Delay
	d.Time = d.Time.Add(delay)
	d.ResetAfter = max(d.ResetAfter-delay, 0)
	results := d.Results()
	for i := range results {
		results[i].ResetAfter = max(results[i].ResetAfter-delay, 0)
	}
}
