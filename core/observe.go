package tollgate

import (
	"context"
	"errors"
	"time"
)

// An Outcome says how a decision ended.
type Outcome uint8

const (
	// OutcomeAllowed: every policy allowed the request.
	OutcomeAllowed Outcome = iota + 1
	// OutcomeDelayed: the policies allowed the request after a wait
	// (Request.MaxDelay, Wait).
	OutcomeDelayed
	// OutcomeDenied: a policy denied the request.
	OutcomeDenied
	// OutcomeShadowDenied: a policy denied the request, but its plan is in
	// shadow mode (WithShadow), so it was let through.
	OutcomeShadowDenied
	// OutcomeFailedOpen: the store or the resolver failed, and FailOpen
	// let the request through without figures.
	OutcomeFailedOpen
	// OutcomeFailedClosed: the store or the resolver failed, and
	// FailClosed denied the request.
	OutcomeFailedClosed
	// OutcomeRejected: the request could never be decided: an invalid
	// tenant, cost or plan, or a store that cannot apply the plan.
	OutcomeRejected
)

// String returns the outcome as metrics and logs name it: "allowed",
// "delayed", "denied", "shadow_denied", "failed_open", "failed_closed" or
// "rejected".
func (o Outcome) String() string {
	switch o {
	case OutcomeAllowed:
		return "allowed"
	case OutcomeDelayed:
		return "delayed"
	case OutcomeDenied:
		return "denied"
	case OutcomeShadowDenied:
		return "shadow_denied"
	case OutcomeFailedOpen:
		return "failed_open"
	case OutcomeFailedClosed:
		return "failed_closed"
	case OutcomeRejected:
		return "rejected"
	}
	return "unknown"
}

// An Observation is one decision as an Observer sees it. It is a value, so
// that observing costs no allocation; Tenant is for trackers that need it,
// never for metric labels (its cardinality is the number of tenants).
type Observation struct {
	Time    time.Time
	Tenant  string
	Plan    string // the plan's name; "" when it could not be resolved
	Policy  string // the policy closest to denying, or the one that denied
	Budget  string
	Method  string
	Route   string // the router's pattern, never the raw path
	Cost    int64
	Outcome Outcome

	// Remaining and Capacity describe Policy: tokens left, and its burst
	// or quota. Both are 0 when no store decided.
	Remaining, Capacity int64

	// Delay is how long a delayed request waited for its tokens.
	Delay time.Duration

	// Fallback reports that the fallback store decided, the main one
	// having failed.
	Fallback bool

	// StoreLatency is the time the store spent waiting on I/O to answer,
	// or to fail, as it reports it (Op.Latency); 0 for an in-process store
	// and when it was not called.
	StoreLatency time.Duration

	// ErrorKind classifies the failure of a failed or rejected decision:
	// "resolver", "timeout", "misconfigured", "unavailable", "invalid" or
	// a finer kind that the store's error reports (see ErrorKind).
	ErrorKind string
}

// An Observer is told of every decision a Limiter makes, in the request's
// goroutine, after the decision and before the Limiter returns. Observe
// must be quick and safe for concurrent use; it must not keep o's strings
// beyond what it counts (they may be a framework's reused memory only if
// the adapter copied them, which tollgate's adapters do).
type Observer interface {
	Observe(ctx context.Context, o Observation)
}

// WithObserver adds o to the Observers of the Limiter. A Limiter without
// one does no work for them: no clock reads, no copies.
func WithObserver(o Observer) Option {
	return func(l *Limiter) {
		if o != nil && !isNil(o) {
			l.observers = append(l.observers, o)
		}
	}
}

// ErrorKind classifies err, a store's or a resolver's failure, for metrics
// and logs: the kind that err (or an error it wraps) reports with an
// ErrorKind() string method, else "misconfigured" for ErrMisconfigured,
// "timeout" for a deadline, and "unavailable" for anything else.
func ErrorKind(err error) string {
	var k interface{ ErrorKind() string }
	switch {
	case err == nil:
		return ""
	case errors.As(err, &k):
		return k.ErrorKind()
	case errors.Is(err, ErrMisconfigured):
		return "misconfigured"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "unavailable"
}

// observe tells the observers of d, which ended in outcome.
func (l *Limiter) observe(ctx context.Context, req *Request, d *Decision, latency time.Duration, kind string) {
	o := Observation{
		Time:         d.Time,
		Tenant:       d.Tenant,
		Plan:         d.Plan.Name,
		Policy:       d.Policy,
		Budget:       d.Budget,
		Method:       req.Method,
		Route:        req.route(),
		Cost:         d.Cost,
		Outcome:      d.Outcome,
		Remaining:    d.Remaining,
		Delay:        d.Delay,
		Fallback:     d.Fallback,
		StoreLatency: latency,
		ErrorKind:    kind,
	}
	if d.rules != nil {
		p := &d.rules.policies[d.policyIndex]
		o.Capacity = p.Limit.Burst
		if !p.Quota.IsZero() {
			o.Capacity = p.Quota.Tokens
		}
	}
	for _, ob := range l.observers {
		ob.Observe(ctx, o)
	}
}
