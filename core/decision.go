package tollgate

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/hooks"
	"github.com/tollgate-go/tollgate/core/storekit"
)

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
	// proceeds (Limiter.Hold does, and gives the tokens back if the wait
	// is cut short). Reservations are granted in order of arrival across
	// every replica that shares the store, so waiting callers never
	// exceed the rate. A quota never reserves, and neither does a plan in
	// shadow mode.
	MaxDelay time.Duration

	// Method and Route describe the request in logs and metrics. Route
	// should be the router's pattern ("/users/{id}"), never the raw path,
	// so that it does not multiply their cardinality.
	Method string
	Route  string
}

// A Decision is a Limiter's answer to one Request.
//
// Remaining, RetryAfter and ResetAfter describe the policy closest to
// denying the request, named by Policy: on a denial, the one that holds it
// back longest; otherwise the one with the fewest tokens left. RetryAfter
// is then the time until every policy would allow the request. Policies and
// Results give the figures of every policy that applied.
//
// The zero Decision denies, and has no figures.
type Decision struct {
	Allowed bool
	Tenant  string
	Plan    string // the plan's name; "" when it could not be resolved
	Cost    int64
	Budget  string
	Method  string
	Route   string

	Policy     string        // the policy the figures below describe
	Remaining  int64         // whole tokens left
	RetryAfter time.Duration // > 0 only when denied: until every policy allows the request
	ResetAfter time.Duration // until the policy is full again
	Time       time.Time     // when the decision was made

	// Delay is how long the caller must wait before it proceeds: > 0 only
	// for a request with MaxDelay whose tokens were reserved.
	Delay time.Duration

	// Shadow reports that a policy denied the request but its plan is in
	// shadow mode (WithShadow): Allowed is true, the denial counted.
	Shadow bool

	// Degraded reports that the Store or the PlanResolver failed and the
	// failure policy decided; Err holds the failure. A degraded decision
	// carries figures only if the fallback store decided it, which
	// Fallback reports.
	Degraded bool
	Fallback bool
	Err      error

	// Latency is the time the store waited on I/O to answer, or to fail;
	// 0 for an in-process store.
	Latency time.Duration

	outcome     outcome
	failure     string // the kind of failure, for FailureKind
	mistake     error  // the configuration mistake that rejected it, for the log
	rules       *ruleSet
	n           int // policies that applied
	results     [inlinePolicies]Result
	more        []Result   // the results past inlinePolicies, for large plans
	mark        int64      // the store's mark of a reservation, for Cancel
	lease       string     // the slot held in in-flight policies, for Release
	slotAt      int32      // the slot's index in its shard of the Limiter's slots
	held        *heldSlots // the slots held without a lease, of an in-process store
	heldGen     uint64     // held.gen when d took them
	figures     bool       // the figures may be shown to the client
	policyIndex int        // of Policy, in Policies
}

// inlinePolicies is how many policies' results a Decision holds without an
// allocation; plans rarely have more.
const inlinePolicies = 4

type outcome uint8

const (
	outcomeRejected outcome = iota
	outcomeAllowed
	outcomeDelayed
	outcomeDenied
	outcomeShadowDenied
	outcomeFailedOpen
	outcomeFailedClosed
)

var outcomeNames = [...]string{"rejected", "allowed", "delayed", "denied", "shadow_denied", "failed_open", "failed_closed"}

// Outcome returns how the decision ended, as metrics and logs name it:
// "allowed", "delayed" (allowed after a wait), "denied", "shadow_denied"
// (denied, but let through in shadow mode), "failed_open" or
// "failed_closed" (the store or the resolver failed and the failure policy
// decided), or "rejected" (the request could never be decided: an invalid
// tenant, cost or plan).
func (d *Decision) Outcome() string { return outcomeNames[d.outcome] }

// FailureKind classifies the failure of a degraded or rejected decision
// for metrics and logs: "resolver", "timeout", "misconfigured",
// "unavailable", "invalid", or a finer kind that the store's error reports
// with an ErrorKind() string method. It is "" for a decision that did not
// fail.
func (d *Decision) FailureKind() string { return d.failure }

// failureKind classifies a store's error.
func failureKind(err error) string {
	var k interface{ ErrorKind() string }
	switch {
	case errors.As(err, &k):
		return k.ErrorKind()
	case errors.Is(err, storekit.ErrMisconfigured):
		return "misconfigured"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "unavailable"
}

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

// Capacity returns the size of the policy that Policy names: its burst, or
// its quota's tokens; 0 when no store decided.
func (d *Decision) Capacity() int64 {
	if d.rules == nil {
		return 0
	}
	return d.rules.rules[d.policyIndex].Burst
}

// policyIsQuota reports whether the policy d's figures describe is a quota.
func (d *Decision) policyIsQuota() bool {
	return d.rules != nil && d.rules.rules[d.policyIndex].Kind == storekit.Quota
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

// PolicyKind returns the kind of the policy that Policy names: "bucket",
// "quota" or "in-flight"; "" when no store decided.
func (d *Decision) PolicyKind() string {
	if d.rules == nil {
		return ""
	}
	switch d.rules.rules[d.policyIndex].Kind {
	case storekit.Quota:
		return "quota"
	case storekit.InFlight:
		return "in-flight"
	}
	return "bucket"
}

// slotsOnly reports whether d was denied by in-flight policies alone: the
// request may pass as soon as a slot frees.
func (d *Decision) slotsOnly() bool {
	if d.Allowed || d.rules == nil || len(d.rules.inFlight) == 0 {
		return false
	}
	for i, r := range d.Results() {
		if !r.Allowed && d.rules.rules[i].Kind != storekit.InFlight {
			return false
		}
	}
	return true
}

func init() {
	// The HTTP layer caches header values in the memo of the policies
	// a decision applied.
	hooks.PolicyMemo = func(d any) *atomic.Value {
		if rs := d.(*Decision).rules; rs != nil {
			return &rs.memo
		}
		return nil
	}
}
