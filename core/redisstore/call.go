package redisstore

import (
	"strconv"
	"sync/atomic"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// A call is one Op on its way to Redis: a Take (an OpTake of one rule) or a
// Do.
type call struct {
	op     *tollgate.Op
	tenant string   // the Redis key of the tenant's main bucket: its hash tag is every rule's
	keys   []string // the rules' keys, as the script takes them (two per quota)
	bounds []bounds // per quota rule, in rule order: its candidate periods

	deadline time.Time // when the caller stops waiting
	trip     atomic.Pointer[trip]

	// Written by whoever answers the call, before done is closed.
	err error

	state atomic.Int32
	done  chan struct{}

	// The call's own Op, which op points to: a Take's, or a copy of a
	// Do's (see Store.Do). The arrays are room for it, so that a call
	// costs one allocation for a Take and few for a Do.
	takeOp     tollgate.Op
	takeRule   [1]tollgate.Rule
	takeResult [1]tollgate.Result
	takeKey    [1]string
	ownRules   [4]tollgate.Rule
	ownResults [4]tollgate.Result
	ownMarks   [4]int64
}

const (
	callPending int32 = iota
	callDelivered
	callAbandoned
)

// deliver hands c's answer to its caller, unless the caller gave up.
func (c *call) deliver() {
	if c.state.CompareAndSwap(callPending, callDelivered) {
		close(c.done)
	}
}

// bounds are a quota's candidate periods [b0, b1) and [b1, b2), in
// microseconds since the Unix epoch, around the Store's own clock: the
// period that holds the local now and its nearest neighbour. The script
// picks the one that holds Redis's now.
type bounds struct{ b0, b1, b2 int64 }

func quotaBounds(q tollgate.Quota, now time.Time) bounds {
	start, end := q.Bounds(now)
	if now.Sub(start) < end.Sub(now) {
		prev, _ := q.Bounds(start.Add(-time.Nanosecond))
		return bounds{prev.UnixMicro(), start.UnixMicro(), end.UnixMicro()}
	}
	_, next := q.Bounds(end)
	return bounds{start.UnixMicro(), end.UnixMicro(), next.UnixMicro()}
}

// ruleKey returns the key of a rule's state: the tenant's main key for Sub
// "", else the main key, ':' and Sub; the hash tag stays the tenant's.
func ruleKey(tenant, sub string) string {
	if sub == "" {
		return tenant
	}
	return tenant + ":" + sub
}

// quotaKey returns the key of a quota's period that starts at start (µs).
func quotaKey(tenant, sub string, start int64) string {
	return ruleKey(tenant, sub) + ":" + strconv.FormatInt(start/1e6, 10)
}

// prepareKeys fills in c.keys and c.bounds for c.op at now (local time).
func (c *call) prepareKeys(now time.Time) {
	op := c.op
	for i, r := range op.Rules {
		if !r.IsQuota() {
			c.keys = append(c.keys, ruleKey(c.tenant, r.Sub))
			continue
		}
		var b bounds
		if op.Kind == tollgate.OpCancel {
			// The period the reservation counted in, from its mark.
			var start int64
			if i < len(op.Marks) {
				start = op.Marks[i]
			}
			_, end := r.Quota.Bounds(time.UnixMicro(start))
			b = bounds{start, end.UnixMicro(), end.UnixMicro()}
			k := quotaKey(c.tenant, r.Sub, start)
			c.keys = append(c.keys, k, k)
		} else {
			b = quotaBounds(r.Quota, now)
			c.keys = append(c.keys, quotaKey(c.tenant, r.Sub, b.b0), quotaKey(c.tenant, r.Sub, b.b1))
		}
		c.bounds = append(c.bounds, b)
	}
}

// appendScript appends c's keys and arguments to a script call's (see
// opScript).
func (c *call) appendScript(keys []string, args []any) ([]string, []any) {
	op := c.op
	keys = append(keys, c.keys...)
	header := int(op.Kind) + 8*len(op.Rules)
	if op.MaxDelay > 0 && (op.Kind == tollgate.OpTake || op.Kind == tollgate.OpInspect) {
		args = append(args, header+4, min(op.MaxDelay, tollgate.MaxWindow).Microseconds())
	} else {
		args = append(args, header)
	}
	cancel := op.Kind == tollgate.OpCancel
	q := 0
	for i, r := range op.Rules {
		if !r.IsQuota() {
			interval := r.Limit.TokenInterval()
			args = append(args, r.Limit.Burst*interval, op.Cost*interval)
		} else {
			b := c.bounds[q]
			q++
			args = append(args, -r.Quota.Tokens, op.Cost, b.b0, b.b1, b.b2)
		}
		if cancel {
			var mark int64
			if i < len(op.Marks) {
				mark = op.Marks[i]
			}
			args = append(args, mark)
		}
	}
	return keys, args
}

// A trip is one round trip to Redis.
type trip struct {
	state atomic.Int32
}

const (
	tripInFlight int32 = iota
	tripBack           // answered before any of its callers' deadlines
	tripLate           // a caller's deadline passed first: counted as a failure
)
