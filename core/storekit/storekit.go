// Package storekit is for authors of tollgate stores: the operation a
// tollgate.Limiter asks its Store to apply, the rules a tenant's state is
// kept under, and the errors and statistics a store reports. Applications
// that use tollgate never import it; they pick memory.New or
// redisstore.New.
//
// A store keeps, per tenant, the state of every rule a Limiter has given it
// and applies an Op to all the rules of one tenant in one atomic step: a
// request passes only if every rule allows it, and a denied request takes
// from none. Two token buckets are the same when their Name is; a quota's
// state belongs to its Name too, whatever its period, so a tenant whose
// plan changes keeps what it used. The conformance kit in package
// tollgate/core/storetest checks a store against the reference model.
package storekit

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A Kind says what an Op does.
type Kind uint8

const (
	// Take takes Cost tokens from every rule if every rule allows it, and
	// from none otherwise. With MaxDelay > 0 a token bucket short of
	// tokens may reserve them instead (see Op.MaxDelay).
	Take Kind = iota + 1
	// Inspect reports each rule's state now, as a denied Take would, and
	// takes nothing.
	Inspect
	// Reset forgets every rule of the tenant that the store holds, those
	// named in the Op and any other: buckets are full again and quotas
	// unused.
	Reset
	// Cancel gives back the tokens of a granted Take that reserved them
	// (its Mark), when the caller will not proceed after all. Once the
	// reserved time has come it gives back nothing. It releases the
	// Take's Lease in any case.
	Cancel
	// Check asks the store whether it can work at all: its options, and
	// for a store behind a network its address, credentials and
	// permissions. It touches no tenant.
	Check
	// SaveOverride keeps Value as the override of Tenant, replacing any
	// other, or forgets Tenant's override if Value is nil. Overrides are
	// the Limiter's (it encodes them); the store keeps them for every
	// replica that shares it, with no rules.
	SaveOverride
	// LoadOverrides reports the store's Version of its overrides and
	// change log and, if it differs from the Op's, every override
	// (Overrides) and the latest changes, newest first (Notes).
	LoadOverrides
	// Release gives back the slot that the Op's Lease holds in each of
	// its InFlight rules: the request has ended.
	Release
	// Renew extends the Op's Lease in each of its InFlight rules to
	// LeaseTTL from now, while a long request runs. A lease that has
	// expired is not renewed: its slot may have gone to another request.
	Renew
)

// MaxNotes is how many changes a store keeps in its log, the newest.
const MaxNotes = 100

// A RuleKind says what a Rule limits.
type RuleKind uint8

const (
	// Bucket is a token bucket, computed as GCRA: Burst tokens that come
	// back one every Interval microseconds.
	Bucket RuleKind = iota + 1
	// Quota is a calendar quota: Burst tokens per period, all of them
	// back at once when a period starts.
	Quota
	// InFlight caps the tenant's requests in flight at Burst: a granted
	// Take holds one slot, whatever its cost, under the Op's Lease until
	// a Release gives it back or the lease expires. Its state is the set
	// of live leases; Reset leaves it alone, as it counts requests that
	// still run. A denied rule's RetryAfter is 0: no store can know when
	// a request ends.
	InFlight
)

// A Rule is one limit of a tenant.
type Rule struct {
	Kind RuleKind

	// Name tells the rule's state apart from the tenant's other rules; ""
	// is the tenant's main bucket. Names are the Limiter's: "day",
	// "b:reports" and the like.
	Name string

	// Burst is a bucket's capacity, or a quota's tokens per period.
	Burst int64

	// Interval is the time, in whole microseconds, a bucket takes to get
	// one token back. It is 0 for a quota.
	Interval int64

	// Period returns the bounds of the quota period that holds t (start
	// inclusive, end exclusive). A store calls it with its own clock's
	// time: Redis's, for the Redis store. It is nil for a bucket.
	Period func(t time.Time) (start, end time.Time)
}

// BucketRule returns the main bucket's rule (Name "") for a token bucket of
// burst tokens refilled at rate tokens a second. Its Interval is 1e6/rate
// microseconds rounded up, so that the long-run rate never exceeds rate:
// rates that divide a million (1, 2, 10, 50, 200 a second) are exact, others
// are enforced within a microsecond a token. rate must be at least 1e-9.
func BucketRule(rate float64, burst int64) Rule {
	t := 1e6 / rate
	n := int64(t)
	// A rate such as 0.1/s can land a hair above a whole number in
	// floating point; that must not cost it a microsecond.
	if t-float64(n) > 1e-9*t {
		n++
	}
	return Rule{Kind: Bucket, Burst: burst, Interval: max(n, 1)}
}

// Tolerance returns how far ahead of now a bucket's theoretical arrival
// time may be after a request is allowed: Burst intervals.
func (r *Rule) Tolerance() int64 { return r.Burst * r.Interval }

// A Result is one rule's answer to an Op, or a store's answer to a Take of
// one token bucket.
type Result struct {
	Allowed    bool
	Remaining  int64         // whole tokens left after this request
	RetryAfter time.Duration // > 0 only when denied: until Cost tokens are available
	ResetAfter time.Duration // until the bucket is full again, or the quota's period ends
}

// An Op is one atomic step on the rules of one tenant. The Limiter fills in
// the fields above the line and the store those below it. A store must not
// keep the Op, its Rules or its Results after it returns.
type Op struct {
	Kind   Kind
	Tenant string // every rule's state is kept under it
	Rules  []Rule
	Cost   int64 // tokens a request takes from every rule, >= 1

	// MaxDelay, for a Take, lets token buckets short of tokens grant them
	// up to MaxDelay from now: the request then proceeds after Delay.
	// Reservations are granted in order of arrival. A quota never
	// reserves: a request it cannot serve now is denied.
	MaxDelay time.Duration

	// Now is the time of the decision, with a monotonic reading, for a
	// store on the caller's clock (the memory store). A store with a
	// clock of its own (Redis's TIME) ignores it; the zero Time makes a
	// store read its clock.
	Now time.Time

	// Mark, for a Cancel, is the Mark of the Take to give back.
	Mark int64

	// Lease names the slot a Take takes in each InFlight rule, and that
	// a Release, a Renew or a Cancel gives back or extends; LeaseTTL is
	// how long the slot is held unless renewed. Leases are unique: the
	// Limiter draws them at random. Of an InProcess store, the Limiter
	// takes slots without a Lease (see InProcess).
	Lease    string
	LeaseTTL time.Duration

	// Slot is the store's own note of where it keeps the slots of a
	// granted Take (see below the line). The Limiter passes it back, to
	// that store alone, in the Release and the Renews of the same Tenant
	// and Lease, so that the store may find them without a lookup; the
	// store checks that what it names is still in use. nil otherwise.
	Slot any

	// Value, for a SaveOverride, is the tenant's override, or nil.
	Value []byte

	// Note, if set on a SaveOverride or a Reset, is a change that the
	// store adds to its change log, dropping the oldest past MaxNotes, in
	// the same step; every note and every saved override moves the
	// Version on.
	Note []byte

	// Version, for a LoadOverrides, is the version of the overrides the
	// caller holds (0 for none), and then the store's.
	Version int64

	// ------------------------------------------------------------------

	// Allowed reports whether a Take was granted (now, or after Delay),
	// or an Inspect would be.
	Allowed bool

	// Delay is how long a granted Take with MaxDelay must wait.
	Delay time.Duration

	// Mark, after a granted Take that reserved, identifies the
	// reservation for a Cancel: the store's time at which it proceeds.
	// Its meaning is the store's own.

	// Slot, after a granted Take that holds slots, may be set by the
	// store: see Slot above. After one without a Lease, of an InProcess
	// store, it is the Take's Held.

	// Results holds one Result per rule, in order: after a granted Take,
	// each rule's state; after a denied one or an Inspect, each rule's
	// state without the request, Allowed if that rule alone would pass
	// it, and RetryAfter if not. A store reuses the slice's capacity.
	Results []Result

	// Latency is the time the store waited on I/O (a Redis round trip),
	// for the Limiter's observers; 0 for a store that never waits.
	Latency time.Duration

	// Overrides and Notes, after a LoadOverrides whose Version differed
	// from the store's, are every override by tenant and the change log,
	// newest first; both nil otherwise.
	Overrides map[string][]byte
	Notes     [][]byte
}

// RetryAfter returns how long until every rule of a denied Op allows it.
func (op *Op) RetryAfter() time.Duration {
	var d time.Duration
	for _, r := range op.Results {
		d = max(d, r.RetryAfter)
	}
	return d
}

// An InProcess store keeps its state in the memory of the caller's
// process, so that its slots die with the requests that hold them: a
// Limiter takes them with no Lease, and neither renews them nor names them.
// Such a slot never expires. A granted Take with InFlight rules, an empty
// Lease and a LeaseTTL of 0 sets Op.Slot to a Held, which gives the slots
// back; a Cancel with an empty Lease gives back tokens alone. (An empty
// Lease with a LeaseTTL is a lease like any other.)
type InProcess interface {
	// InProcess does nothing: it marks the store.
	InProcess()
}

// A Held is the slots that a granted Take without a Lease holds in the
// InFlight rules of an InProcess store. It need not be the Take's alone
// (the memory store's is the count of the tenant's cap), so its caller
// calls Release once per granted Take.
type Held interface {
	// Release gives the slots back.
	Release()
}

// A Doer applies Ops: a tollgate.Store.
type Doer interface {
	Do(ctx context.Context, op *Op) error
}

// TakeRule takes cost tokens from rule, one rule of tenant, through s, and
// returns its Result: the Take method of a store in one line. A cost
// outside 1 to rule.Burst is an error wrapping ErrInvalid, and s is not
// called.
func TakeRule(ctx context.Context, s Doer, tenant string, rule Rule, cost int64) (Result, error) {
	if cost < 1 || cost > rule.Burst {
		return Result{}, fmt.Errorf("%w: cost must be 1 to the burst, %d; got %d", ErrInvalid, rule.Burst, cost)
	}
	op := Op{Kind: Take, Tenant: tenant, Rules: []Rule{rule}, Cost: cost}
	if err := s.Do(ctx, &op); err != nil {
		return Result{}, err
	}
	return op.Results[0], nil
}

// ErrInvalid is wrapped by errors that report a limit, a plan or a cost
// that can never be valid; it is tollgate.ErrInvalidLimit. A store returns
// it only from Take, for a cost its rule can never allow: the Limiter
// checks every Op it builds.
var ErrInvalid = errors.New("tollgate: invalid limit")

// ErrMisconfigured is wrapped by errors a store reports for a mistake that
// waiting will not mend: wrong credentials, missing permissions, a database
// that does not exist, an invalid option. tollgate.New fails on them when a
// Check reports one.
var ErrMisconfigured = errors.New("tollgate: store misconfigured")

// Stats are a store's counters, for metrics. A store reports what it keeps;
// the rest stays zero.
type Stats struct {
	Tenants          int64  // tenants whose state is held in the process
	Evictions        uint64 // tenants dropped before their state expired, to honour a cap
	DrainedEvictions uint64 // of those, tenants with half or more of a bucket spent
	BreakerOpen      bool   // the store answers without calling its server
	BreakerOpens     uint64 // times the breaker opened
}

// A Reporter is a store that reports Stats. The metrics exporters read
// them through tollgate.Limiter.StoreStats.
type Reporter interface {
	Stats() Stats
}
