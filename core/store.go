package tollgate

import (
	"context"
	"time"
)

// A Result is a Store's answer to one Take.
type Result struct {
	Allowed    bool
	Remaining  int64         // whole tokens left after this request
	RetryAfter time.Duration // > 0 only when denied: until Cost tokens are available
	ResetAfter time.Duration // until the bucket is full again
}

// A Store keeps one token bucket per key and takes tokens from it.
//
// Take takes cost tokens from the bucket of key under limit and reports
// whether the request is allowed. A denied request takes nothing. A Store
// returns an error wrapping ErrInvalidLimit or ErrCostExceedsBurst for a limit
// or cost that can never be valid, and any other error when it could not
// decide (a network or server failure); the Limiter's failure policy applies
// to the latter only.
//
// The limit of a key may change between calls (a tenant changes plan): the
// bucket keeps its state and the new limit applies from that call on.
//
// Implementations must be safe for concurrent use and must make the decisions
// that GCRA makes; the storetest package checks both. A Store that also
// implements MultiStore gets every call of a Limiter through Do instead.
type Store interface {
	Take(ctx context.Context, key string, limit Limit, cost int64) (Result, error)
}

// GCRA computes one decision of the generic cell rate algorithm, the exact
// equivalent of a token bucket whose whole state is one number: the
// theoretical arrival time (TAT), the instant at which the bucket will be
// full again.
//
// All times are integer microseconds on the store's clock. tat is the
// bucket's stored state; a missing bucket is any tat <= now (a full bucket).
// GCRA returns the state to store if the request is allowed and the Result.
// A denied request leaves the state as it was. limit must be valid and cost
// between 1 and limit.Burst.
//
// Every Store must decide exactly as GCRA does; the Redis script is a
// transcription of it in integer arithmetic.
func GCRA(tat, now int64, limit Limit, cost int64) (newTAT int64, r Result) {
	interval := limit.TokenInterval()
	// The bucket is full when tat <= now: a request may then move tat up to
	// burst intervals ahead of now.
	tolerance := limit.Burst * interval
	if tat < now {
		tat = now
	}
	newTAT = tat + cost*interval
	ahead := newTAT - now
	if ahead > tolerance {
		// After a downgrade the debt can exceed the new tolerance: the
		// bucket is then empty, not negative.
		r.Remaining = max(tolerance-(tat-now), 0) / interval
		r.RetryAfter = micros(ahead - tolerance)
		r.ResetAfter = micros(tat - now)
		return tat, r
	}
	r.Allowed = true
	r.Remaining = (tolerance - ahead) / interval
	r.ResetAfter = micros(ahead)
	return newTAT, r
}

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// A LimitingStore is a Store that decides a token bucket under a limit of
// its own derived from the one it is given, such as a fallback that divides
// each limit among the replicas of a fleet. LimitFor returns the limit a
// request of cost under limit is decided by; the Limiter reports it in the
// Decision's policies, so that response headers describe the bucket that
// decided.
type LimitingStore interface {
	Store
	LimitFor(limit Limit, cost int64) Limit
}
