package tollgate

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A Rule is one limit that a Store applies to a request: a token bucket
// (Limit) or, when Quota is set, a calendar quota. A Store keeps the state
// of a rule under the Op's Key and the rule's Sub, so that every rule of one
// tenant lives together (on Redis, in the tenant's Cluster slot).
//
// A token bucket's state is its theoretical arrival time, as GCRA computes
// it. A quota's state is the tokens used in the current period, kept apart
// per period: a request in a new period starts from an unused quota. A
// quota's Result has the tokens left in the period as Remaining, the time
// until the period ends as ResetAfter (0 while nothing of it is used), and,
// on a denial, the time until the next period starts as RetryAfter.
type Rule struct {
	// Sub tells this rule's state apart from the other rules of the same
	// Key: "" is the tenant's main bucket, the one Store.Take keeps under
	// the key alone. Other names are the caller's; the Limiter uses
	// "day", "month", "b:<budget>", "b:<budget>:day" and so on.
	Sub string

	Limit Limit // the token bucket, when Quota is zero
	Quota Quota // the calendar quota, if not zero
}

// IsQuota reports whether r is a calendar quota rather than a token bucket.
func (r Rule) IsQuota() bool { return !r.Quota.IsZero() }

// Validate reports why r can not take a request of cost tokens, naming the
// field at fault, or nil.
func (r Rule) Validate(cost int64) error {
	if r.IsQuota() {
		if err := r.Quota.Validate(); err != nil {
			return err
		}
		return r.Quota.CheckCost(cost)
	}
	if err := r.Limit.Validate(); err != nil {
		return err
	}
	return r.Limit.CheckCost(cost)
}

// An OpKind says what an Op does.
type OpKind uint8

const (
	// OpTake takes Cost tokens from every rule if every rule allows it,
	// and from none otherwise. With MaxDelay > 0 a token bucket that is
	// short of tokens may reserve them instead: see Op.MaxDelay.
	OpTake OpKind = iota
	// OpInspect reports, in Results, each rule's state now (tokens left,
	// time until full) and whether a request of Cost would pass it
	// (Allowed, and RetryAfter if not), and takes nothing: the Results of
	// a denied OpTake.
	OpInspect
	// OpReset forgets the state of every rule: buckets become full and
	// the current period of each quota unused.
	OpReset
	// OpCancel gives back the tokens that a granted OpTake reserved,
	// given the same Key, Rules and Cost and the Marks it returned: all
	// of them if no later request has taken tokens since, less what
	// later requests depend on otherwise, and none once the reserved
	// time has come (as x/time/rate's Reservation.Cancel does).
	OpCancel
)

// String returns "take", "inspect", "reset" or "cancel".
func (k OpKind) String() string {
	switch k {
	case OpTake:
		return "take"
	case OpInspect:
		return "inspect"
	case OpReset:
		return "reset"
	case OpCancel:
		return "cancel"
	}
	return fmt.Sprintf("OpKind(%d)", int(k))
}

// An Op is one atomic step on the rules of one key: a request that must pass
// several limits (a burst rate and a daily quota, a route's budget), a
// reservation, an inspection, a reset or a cancellation. The caller fills in
// the fields above the line; MultiStore.Do fills in those below it.
//
// Do trusts its Op: every Rule must be valid for Cost (Rule.Validate), as
// the Limiter ensures once per plan. Callers that build Ops from their own
// figures validate them first.
type Op struct {
	Kind  OpKind
	Key   string // the tenant; every rule's state is kept under it
	Rules []Rule
	Cost  int64 // tokens a request takes from every rule, >= 1 (OpTake, OpInspect, OpCancel)

	// MaxDelay, for OpTake, lets a token bucket that is short of tokens
	// grant them in the future, up to MaxDelay from now: GCRA moves the
	// bucket's theoretical arrival time past the burst, and the request
	// may proceed once Delay has passed. Reservations are handed out in
	// order of arrival, so waiting callers never exceed the rate. A
	// quota never reserves: a request it cannot serve now is denied.
	MaxDelay time.Duration

	// Now is the time of the decision, with a monotonic clock reading,
	// for Stores that run on the caller's clock (the memory store); a
	// Store with a clock of its own (Redis's TIME, a test clock) ignores
	// it. The zero Time makes the Store read its clock.
	Now time.Time

	// Deadline is when the caller stops waiting for the Store, which
	// must then fail the Op with an error rather than wait longer. The
	// zero Time leaves the Store's default. Either way Do returns when
	// ctx is done.
	Deadline time.Time

	// ------------------------------------------------------------------

	// Allowed reports whether an OpTake was granted (taken now, or
	// reserved for Delay from now) or an OpInspect would be.
	Allowed bool

	// Delay is how long a granted OpTake with MaxDelay must wait before
	// it proceeds; 0 when the tokens were there.
	Delay time.Duration

	// Results holds one Result per rule, in order: each rule's state
	// after a granted OpTake; for a denied one (and OpInspect), each
	// rule's state without the request, Allowed if that rule alone would
	// pass it, and RetryAfter when it would if not. Do reuses the slice's
	// capacity.
	Results []Result

	// Latency is the time the Op spent waiting on I/O (a Redis round
	// trip, or until it failed), for the Limiter's observers; a store that
	// never waits leaves it 0, which saves clock reads.
	Latency time.Duration

	// Marks holds, after a granted OpTake, one number per rule that
	// OpCancel needs to give the tokens back; an OpCancel reads them. They
	// mean something only to the Store that made them. Do reuses the
	// slice's capacity.
	Marks []int64
}

// RetryAfter returns how long until every rule of a denied Op allows it:
// the longest RetryAfter of its Results.
func (op *Op) RetryAfter() time.Duration {
	var d time.Duration
	for _, r := range op.Results {
		d = max(d, r.RetryAfter)
	}
	return d
}

// A MultiStore is a Store that runs Ops: it decides on several limits of
// one key in one atomic step (one Redis script call, one memory-store
// operation), reserves tokens for callers willing to wait, inspects and
// resets a key's limits, and cancels reservations. A denied OpTake takes
// from none of its rules.
//
// Do returns an error only when it could not act: the Store failed or was
// out of reach (the Limiter then applies its failure policy). A denial is
// not an error; see Op.Allowed.
//
// Take(ctx, key, limit, cost) and an OpTake of one Rule{Limit: limit}
// under key make the same decision on the same state.
type MultiStore interface {
	Store
	Do(ctx context.Context, op *Op) error
}

// A Checker is a Store that can tell, before the first request, whether it
// can work at all: its own configuration, and for a store behind a network
// its address, credentials and permissions. tollgate.New calls Check on its
// stores and fails on a misconfiguration; a store that is merely out of
// reach for now reports an error that the Limiter's failure policy covers
// (Check says which by wrapping ErrMisconfigured or not).
type Checker interface {
	Check(ctx context.Context) error
}

// ErrMisconfigured is wrapped by errors that a Store reports for a mistake
// that waiting will not mend: wrong credentials, missing permissions, a
// database that does not exist, an invalid option. The Limiter logs them at
// level Error with their cause; tollgate.New fails on them.
var ErrMisconfigured = errors.New("tollgate: store misconfigured")
