package redisstore

import (
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// A call is one Op on its way to Redis: a Take (an OpTake of one rule) or a
// Do. Calls are pooled: a caller that got its answer hands its call back
// for the next request (see reusable), so a decision allocates nothing of
// its own.
type call struct {
	op     *tollgate.Op
	tenant string   // the Redis key of the tenant's main bucket: its hash tag is every rule's
	keys   []string // the rules' keys, as the script takes them (one per rule)
	bounds []bounds // per quota rule, in rule order: its candidate periods
	args   []int64  // the script's arguments for the Op (see encode)
	rules  int      // the Op's number of rules
	kind   tollgate.OpKind

	deadline time.Time // when the caller stops waiting
	trip     atomic.Pointer[trip]

	// Written by whoever answers the call, before done is sent.
	err      error
	answered bool // by the watchdog, while its round trip still holds the call

	state atomic.Int32
	done  chan struct{} // one send per answer: buffered, so it is reused with the call

	// The call's own Op, which op points to: a Take's, or a copy of a
	// Do's (see Store.Do).
	own tollgate.Op

	argBuf   [3]int64 // room for a Take's arguments
	boundBuf [2]bounds
}

// A takeCall is a call with room for a Take's Op.
type takeCall struct {
	call
	rule   [1]tollgate.Rule
	result [1]tollgate.Result
	mark   [1]int64
	key    [1]string
}

// A doCall is a call with room for a copy of a Do's Op of up to four rules.
type doCall struct {
	call
	rules   [4]tollgate.Rule
	results [4]tollgate.Result
	marks   [4]int64
	keys    [6]string
	args    [24]int64
}

var (
	takeCalls = sync.Pool{New: func() any {
		tc := &takeCall{}
		tc.done = make(chan struct{}, 1)
		return tc
	}}
	doCalls = sync.Pool{New: func() any {
		dc := &doCall{}
		dc.done = make(chan struct{}, 1)
		return dc
	}}
)

// reset readies a pooled call for a new Op.
func (c *call) reset() {
	c.err, c.answered, c.bounds, c.deadline = nil, false, c.boundBuf[:0], time.Time{}
	c.trip.Store(nil)
	c.state.Store(callPending)
}

// reusable reports whether, once its caller has returned, nothing else
// will touch c: it was not abandoned, and the round trip that carried it
// (if any) has delivered it or will not look at it again.
func (c *call) reusable() bool {
	return c.state.Load() != callAbandoned && !c.answered
}

// A call's state: whoever writes its answer (into its Op, or err) claims
// it first, so that a caller that gave up can reuse its Op at once.
const (
	callPending   int32 = iota
	callAnswering       // claimed: its answer is being written
	callDelivered
	callAbandoned // its caller gave up
)

// claim reserves the right to answer c; it fails if c was answered or
// abandoned.
func (c *call) claim() bool { return c.state.CompareAndSwap(callPending, callAnswering) }

// release hands the answer written after claim to the caller.
func (c *call) release() {
	c.state.Store(callDelivered)
	c.done <- struct{}{}
}

// fail answers c with err, unless it was answered or abandoned.
func (c *call) fail(err error) bool {
	if !c.claim() {
		return false
	}
	c.err = err
	c.release()
	return true
}

func timeoutErr(c *call) error {
	return fmt.Errorf("%w: no answer by the call's deadline", ErrUnavailable)
}

// bounds are a quota's candidate periods [b0, b1) and [b1, b2), in
// microseconds since the Unix epoch, around the Store's own clock: the
// period that holds the local now and its nearest neighbour. The script
// picks the one that holds Redis's now.
// w is the one whose key the call passes: the period that holds the
// Store's own clock.
type bounds struct{ b0, b1, b2, w int64 }

// A boundsCache remembers each quota's candidate periods for the half
// period during which they stay the same, so that a decision does not
// compute calendar dates. It is safe for concurrent use.
type boundsCache struct{ m sync.Map } // tollgate.Quota -> *cachedBounds

type cachedBounds struct {
	b        bounds
	from, to int64 // µs: the local times for which b holds
}

// get returns quotaBounds(q, now).
func (c *boundsCache) get(q tollgate.Quota, now time.Time) bounds {
	t := now.UnixMicro()
	if v, ok := c.m.Load(q); ok {
		if e := v.(*cachedBounds); t >= e.from && t < e.to {
			return e.b
		}
	}
	b := quotaBounds(q, now)
	// b stays the same while now is in the same half of the same period:
	// the first half of [b1, b2) or the second half of [b0, b1). Near the
	// middle either neighbour would do: the script needs only that
	// Redis's clock falls in one of the two periods.
	e := &cachedBounds{b: b}
	if t >= b.b1 {
		e.from, e.to = b.b1, b.b1+(b.b2-b.b1)/2
	} else {
		e.from, e.to = b.b0+(b.b1-b.b0)/2, b.b1
	}
	c.m.Store(q, e)
	return b
}

func quotaBounds(q tollgate.Quota, now time.Time) bounds {
	start, end := q.Bounds(now)
	if now.Sub(start) < end.Sub(now) {
		prev, _ := q.Bounds(start.Add(-time.Nanosecond))
		return bounds{b0: prev.UnixMicro(), b1: start.UnixMicro(), b2: end.UnixMicro()}
	}
	_, next := q.Bounds(end)
	return bounds{b0: start.UnixMicro(), b1: end.UnixMicro(), b2: next.UnixMicro()}
}

// ruleKey returns the key of a rule's state: the tenant's main key for Sub
// "", else the main key, ':' and Sub; the hash tag stays the tenant's.
func ruleKey(tenant, sub string) string {
	if sub == "" {
		return tenant
	}
	return tenant + ":" + sub
}

// quotaKey returns the key of a quota's period that starts at start (µs),
// in one allocation.
func quotaKey(tenant, sub string, start int64) string {
	var b [20]byte
	n := strconv.AppendInt(b[:0], start/1e6, 10)
	if sub == "" {
		return tenant + ":" + string(n)
	}
	return tenant + ":" + sub + ":" + string(n)
}

// prepareKeys fills in c.keys and c.bounds for c.op at now (local time),
// with the quotas' candidate periods from cache.
func (c *call) prepareKeys(now time.Time, cache *boundsCache) {
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
			b = bounds{start, end.UnixMicro(), end.UnixMicro(), 0}
			c.keys = append(c.keys, quotaKey(c.tenant, r.Sub, start))
		} else {
			b = cache.get(r.Quota, now)
			start := b.b0
			if now.UnixMicro() >= b.b1 {
				b.w, start = 1, b.b1
			}
			c.keys = append(c.keys, quotaKey(c.tenant, r.Sub, start))
		}
		c.bounds = append(c.bounds, b)
	}
}

// encode fills in c.args, the script's arguments for c's Op (see
// opScript), and c.rules. It runs in the caller's goroutine, before c is
// sent: once a caller has given up, its Op may be reused at once (the
// Limiter pools them), so the goroutine that sends c reads nothing of the
// Op until it has claimed c.
func (c *call) encode() {
	c.rules, c.kind = len(c.op.Rules), c.op.Kind
	if c.args == nil {
		c.args = c.argBuf[:0]
	}
	c.args = c.appendArgs(c.args[:0])
}

// appendArgs appends the script's arguments for c's Op to args.
func (c *call) appendArgs(args []int64) []int64 {
	op := c.op
	header := int64(op.Kind) + 8*int64(len(op.Rules))
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
			args = append(args, -(2*r.Quota.Tokens + b.w), op.Cost, b.b0, b.b1, b.b2)
		}
		if cancel {
			var mark int64
			if i < len(op.Marks) {
				mark = op.Marks[i]
			}
			args = append(args, mark)
		}
	}
	return args
}

// end stops the trip's watchdog for good: once end returns, fire touches
// none of the trip's calls, which their callers may then reuse.
func (tr *trip) end() {
	tr.timer.Stop()
	tr.mu.Lock()
	tr.ended = true
	tr.mu.Unlock()
}

// A trip is one round trip to Redis. Its watchdog answers each of its
// calls with a timeout error at the call's own deadline if Redis has not
// answered by then, and counts the round trip as failed (once).
type trip struct {
	mu    sync.Mutex // held by fire; ended under it once the answers are in
	ended bool
	state atomic.Int32
	sent  int64 // µs on the Store's monotonic clock
	s     *Store
	calls []*call
	timer *time.Timer
}

// watch arms the watchdog, at wall, for the earliest deadline of the trip's
// calls.
func (tr *trip) watch(wall time.Time, r *runner) {
	next := tr.calls[0].deadline
	for _, c := range tr.calls[1:] {
		if c.deadline.Before(next) {
			next = c.deadline
		}
	}
	// The runner's timer, made once and armed once assigned: fire reads
	// tr.timer.
	if r.timer == nil {
		r.timer = time.AfterFunc(time.Duration(math.MaxInt64), r.fire)
	}
	tr.timer = r.timer
	r.trip.Store(tr)
	tr.timer.Reset(next.Sub(wall))
}

// fire answers the calls whose deadlines have passed and re-arms for the
// next.
func (tr *trip) fire() {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.ended {
		return // the round trip is back: its calls may be in new hands
	}
	now := time.Now()
	var next time.Time
	expired := false
	for _, c := range tr.calls {
		if c.state.Load() != callPending {
			continue
		}
		if !now.Before(c.deadline) {
			expired = true
		} else if next.IsZero() || c.deadline.Before(next) {
			next = c.deadline
		}
	}
	// Counted before the callers hear of it: a caller's next call must
	// find the failure recorded.
	if expired && tr.state.CompareAndSwap(tripInFlight, tripLate) {
		tr.s.breaker.failure(micros(tr.s.mono()), tr.sent)
	}
	for _, c := range tr.calls {
		if c.state.Load() == callPending && !now.Before(c.deadline) && c.claim() {
			c.err, c.answered = timeoutErr(c), true
			c.release()
		}
	}
	if !next.IsZero() {
		tr.timer.Reset(time.Until(next))
	}
}

const (
	tripInFlight int32 = iota
	tripBack           // answered before any of its callers' deadlines
	tripLate           // a caller's deadline passed first: counted as a failure
)
