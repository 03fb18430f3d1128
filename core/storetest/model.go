package storetest

import (
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// A Model is the reference implementation of tollgate.MultiStore.Do that
// the kit compares Stores with: the semantics of every OpKind, written for
// clarity rather than speed, in integer microseconds on the time it is
// given. A Store must make the decisions and report the figures that Model
// does for the same Ops at the same times (its Marks may differ: they mean
// something only to the Store that made them).
//
// The rules, as op.go states them:
//
//   - A token bucket is GCRA (tollgate.GCRA): its state is its theoretical
//     arrival time (TAT); the request needs cost x interval, the bucket
//     tolerates Burst x interval ahead of now. With MaxDelay, a bucket that
//     is short may grant a request that must wait up to MaxDelay: the TAT
//     moves by the need all the same, and the Op's Delay is the longest
//     wait of its buckets.
//   - A quota counts the tokens used in the period of Quota.Bounds(now);
//     a request fits if used + cost <= Tokens. Quotas never reserve.
//   - OpTake grants when every rule allows, and then takes from every rule;
//     a denied Op takes nothing. Results hold each rule's state after a
//     granted Op; otherwise (denied, OpInspect, OpCancel, OpReset) the state
//     as it stands, with Allowed and RetryAfter saying whether and when that
//     rule alone allows the request (a quota: at the end of its period).
//   - OpInspect decides as OpTake would, Delay included, and takes nothing.
//   - OpReset forgets every rule's state (the quota's current period).
//   - OpCancel, given the Marks of a granted OpTake: nothing if the Op has
//     no token bucket (quotas never reserve) or once the reserved time
//     (the latest of mark - tolerance over its buckets) has come; otherwise
//     each bucket gets back its need less what later requests took on top
//     of it (TAT - mark), and each quota its cost (in the period it counted
//     in). Results then describe that period, or an unused quota if it has
//     ended.
//
// The zero Model is empty and ready to use. A Model is not safe for
// concurrent use.
type Model struct {
	tats map[string]int64 // bucket: TAT, µs since the Unix epoch
	used map[string]int64 // quota period: tokens used
}

func (m *Model) init() {
	if m.tats == nil {
		m.tats = make(map[string]int64)
		m.used = make(map[string]int64)
	}
}

func bucketKey(key, sub string) string { return key + "\x00" + sub }

func periodKey(key, sub string, start int64) string {
	return key + "\x00" + sub + "\x00" + time.UnixMicro(start).UTC().Format(time.RFC3339Nano)
}

// Do runs op at now, as a MultiStore would, and fills in its results.
func (m *Model) Do(op *tollgate.Op, now time.Time) {
	m.init()
	t := now.UnixMicro()
	cost := max(op.Cost, 1)
	maxDelay := min(max(op.MaxDelay, 0), tollgate.MaxWindow).Microseconds()
	n := len(op.Rules)
	op.Results = make([]tollgate.Result, n)
	marks := append([]int64(nil), op.Marks...)
	op.Marks = op.Marks[:0]
	op.Allowed, op.Delay = false, 0

	type state struct {
		rel        int64 // bucket: TAT - now, >= 0
		used       int64 // quota
		start, end int64 // quota period
	}
	st := make([]state, n)
	for i, r := range op.Rules {
		if r.IsQuota() {
			start, end := r.Quota.Bounds(now)
			st[i].start, st[i].end = start.UnixMicro(), end.UnixMicro()
			if op.Kind == tollgate.OpCancel {
				// The period the reservation counted in.
				_, end := r.Quota.Bounds(time.UnixMicro(markOf(marks, i)))
				st[i].start, st[i].end = markOf(marks, i), end.UnixMicro()
			}
			st[i].used = m.used[periodKey(op.Key, r.Sub, st[i].start)]
		} else {
			st[i].rel = max(m.tats[bucketKey(op.Key, r.Sub)]-t, 0)
		}
	}

	switch op.Kind {
	case tollgate.OpReset:
		for i, r := range op.Rules {
			if r.IsQuota() {
				delete(m.used, periodKey(op.Key, r.Sub, st[i].start))
			} else {
				delete(m.tats, bucketKey(op.Key, r.Sub))
			}
			st[i].rel, st[i].used = 0, 0
		}
	case tollgate.OpCancel:
		act, buckets := int64(0), false
		for i, r := range op.Rules {
			if !r.IsQuota() {
				interval := r.Limit.TokenInterval()
				act = max(act, markOf(marks, i)-r.Limit.Burst*interval)
				buckets = true
			}
		}
		if buckets && t < act {
			for i, r := range op.Rules {
				if r.IsQuota() {
					back := min(cost, st[i].used)
					st[i].used -= back
					m.used[periodKey(op.Key, r.Sub, st[i].start)] = st[i].used
					continue
				}
				need := cost * r.Limit.TokenInterval()
				tat := t + st[i].rel
				back := min(need, need-(tat-markOf(marks, i)))
				if back > 0 {
					tat -= back
					if tat <= t {
						delete(m.tats, bucketKey(op.Key, r.Sub))
						st[i].rel = 0
					} else {
						m.tats[bucketKey(op.Key, r.Sub)] = tat
						st[i].rel = tat - t
					}
				}
			}
		}
	}

	for i, r := range op.Rules {
		if r.IsQuota() && op.Kind == tollgate.OpCancel && st[i].end <= t {
			st[i].used = 0 // the period has ended: a new one begins
		}
	}
	allowed := true
	var delay int64
	for i, r := range op.Rules {
		if r.IsQuota() {
			if st[i].used+cost > r.Quota.Tokens {
				allowed = false
			}
			continue
		}
		interval := r.Limit.TokenInterval()
		if wait := st[i].rel + cost*interval - r.Limit.Burst*interval; wait > 0 {
			delay = max(delay, wait)
			if wait > maxDelay {
				allowed = false
			}
		}
	}
	granted := op.Kind == tollgate.OpTake && allowed
	for i, r := range op.Rules {
		if r.IsQuota() {
			left := st[i].end - t
			if granted {
				m.used[periodKey(op.Key, r.Sub, st[i].start)] = st[i].used + cost
				op.Results[i] = tollgate.Result{Allowed: true, Remaining: max(r.Quota.Tokens-st[i].used-cost, 0), ResetAfter: usec(left)}
				op.Marks = append(op.Marks, st[i].start)
				continue
			}
			over := st[i].used+cost > r.Quota.Tokens
			res := tollgate.Result{Allowed: !over, Remaining: max(r.Quota.Tokens-st[i].used, 0)}
			if over {
				res.RetryAfter = usec(left)
			}
			if st[i].used > 0 {
				res.ResetAfter = usec(left)
			}
			op.Results[i] = res
			continue
		}
		interval := r.Limit.TokenInterval()
		tol, need := r.Limit.Burst*interval, cost*interval
		if granted {
			ahead := st[i].rel + need
			m.tats[bucketKey(op.Key, r.Sub)] = t + ahead
			op.Results[i] = tollgate.Result{Allowed: true, Remaining: max(tol-ahead, 0) / interval, ResetAfter: usec(ahead)}
			op.Marks = append(op.Marks, t+ahead)
			continue
		}
		wait := st[i].rel + need - tol
		op.Results[i] = tollgate.Result{Allowed: wait <= 0, Remaining: max(tol-st[i].rel, 0) / interval,
			RetryAfter: usec(max(wait, 0)), ResetAfter: usec(st[i].rel)}
	}
	if op.Kind == tollgate.OpTake || op.Kind == tollgate.OpInspect {
		op.Allowed = allowed
		if allowed {
			op.Delay = usec(delay)
		}
	}
}

func markOf(marks []int64, i int) int64 {
	if i < len(marks) {
		return marks[i]
	}
	return 0
}

func usec(n int64) time.Duration { return time.Duration(n) * time.Microsecond }
