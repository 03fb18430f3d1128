package memory

import (
	"math"
	"time"

	"github.com/tollgate-go/tollgate/core/storekit"
)

// A token bucket is GCRA: its whole state is its theoretical arrival time
// (TAT), in microseconds of the Store's clock. A request needs Cost x
// Interval, and the bucket tolerates a TAT up to Burst x Interval ahead of
// now; a TAT in the past is a full bucket.
const (
	// fullTAT is the TAT of a bucket no one has taken from: earlier than
	// any time the Store counts, yet far enough from the int64 bounds
	// that no sum with a time or a tolerance overflows.
	fullTAT = math.MinInt64 / 2

	// deadTAT marks a tenant that has been dropped from its shard, so
	// that a Take that still holds it looks it up again instead of taking
	// from a state no one will see.
	deadTAT = math.MinInt64
)

// bucketWait returns how far past the tolerance of r a request of cost
// would take a bucket whose TAT is tat, at t: the time the request must
// wait, if positive.
func bucketWait(tat, t int64, r *storekit.Rule, cost int64) int64 {
	return max(tat-t, 0) + cost*r.Interval - r.Tolerance()
}

// bucketResult returns the result of a request of cost on a bucket whose
// TAT is tat, at t, and the bucket's TAT after it: moved by the request's
// need if granted (a reservation included), or unchanged.
func bucketResult(tat, t int64, r *storekit.Rule, cost int64, granted bool) (storekit.Result, int64) {
	rel := max(tat-t, 0)
	need, tol := cost*r.Interval, r.Tolerance()
	if granted {
		rel += need
		return grantedResult(r, rel), t + rel
	}
	wait := rel + need - tol
	return storekit.Result{Allowed: wait <= 0, Remaining: max(tol-rel, 0) / r.Interval,
		RetryAfter: usec(max(wait, 0)), ResetAfter: usec(rel)}, tat
}

// grantedResult returns the result of a granted request after which the
// bucket is full again in rel microseconds. It is apart from bucketResult
// so that Go inlines it in takeBucket.
func grantedResult(r *storekit.Rule, rel int64) storekit.Result {
	return storekit.Result{Allowed: true, Remaining: max(r.Tolerance()-rel, 0) / r.Interval, ResetAfter: usec(rel)}
}

func usec(n int64) time.Duration { return time.Duration(n) * time.Microsecond }

// takeBucket decides on a request of cost from the main bucket of tenant
// under r at t, without the tenant's lock: the path of Take, and of an Op
// on the main bucket alone. A take (take is false for an Inspect) is granted if it fits now or
// within maxDelay microseconds, and moves the bucket's TAT by
// compare-and-swap, trying again if another request moved it first. It
// returns the bucket's result, whether the request is (or would be)
// granted, and how long it must wait.
func (tb *table) takeBucket(tenant string, r *storekit.Rule, cost, maxDelay, t int64, take bool) (res storekit.Result, granted bool, delay int64) {
	var k lookup
	if len(tenant) <= maxKeyLen {
		k.short(tb, tenant, tb.hash(tenant)) // lookup's common case, inlined
	} else {
		tb.lookup(tenant, &k)
	}
	tn := k.find()
	for {
		tat := int64(fullTAT)
		if tn != nil {
			if tat = tn.tat.Load(); tat == deadTAT {
				tn = k.find() // it waits until the tenant's shard has let it go
				continue
			}
		}
		wait := bucketWait(tat, t, r, cost)
		if wait > maxDelay || !take {
			res, _ = bucketResult(tat, t, r, cost, false)
			return res, wait <= maxDelay, max(wait, 0)
		}
		if tn == nil {
			tn = tb.insert(&k)
			continue
		}
		// The result after the compare-and-swap: the shorter the time
		// from the load, the less often a busy tenant's request loses.
		rel := max(tat-t, 0) + cost*r.Interval
		if tn.tat.CompareAndSwap(tat, t+rel) {
			tn.noteTolerance(r.Tolerance())
			return grantedResult(r, rel), true, max(wait, 0)
		}
		// Another request moved the bucket first: decide again.
	}
}
