package memory

import (
	"math"
	"sync/atomic"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// A bucket's whole state is one word, updated by compare-and-swap:
//
//	bit  63       clear in a bucket; set in the markers deadWord and movedWord
//	bits 62..55   the bucket's scale: its tolerance when last taken from, as
//	              an 8-bit float (scaleOf), which eviction reads
//	bit  54       set when a request was denied since the last one allowed
//	bits 53..0    the bucket's TAT, in µs of the Store's clock
//
// The zero word is a full bucket. Eviction reads the scale and the flag; a
// decision reads only the TAT.
const (
	scaleShift   = 55
	throttledBit = 1 << 54
	tatMask      = 1<<54 - 1

	// deadWord marks a dropped bucket; movedWord one copied to a newer
	// table. Both are terminal for the slot, so compare-and-swap never
	// sees ABA.
	deadWord  = math.MinInt64
	movedWord = math.MinInt64 + 1
)

// maxWindowSeconds is tollgate.MaxWindow less a margin for rounding: a limit
// whose Burst/Rate is below it is certainly valid, so the check needs no
// division.
const maxWindowSeconds = float64(tollgate.MaxWindow) / 1e9 * (1 - 1e-12)

// A rule is a Limit prepared for one decision: the figures GCRA needs.
type rule struct {
	interval  int64 // µs for one token to come back
	tolerance int64 // Burst × interval: how far past now a TAT may be
	scale     int64 // scaleOf(tolerance)
}

// newRule validates limit and cost as tollgate.Limit's Validate and
// CheckCost do, with the same errors, and prepares the rule.
func newRule(limit tollgate.Limit, cost int64) (rule, error) {
	// NaN fails the first comparison and +Inf the second.
	if !(limit.Rate > 0 && limit.Rate <= tollgate.MaxRate && limit.Burst >= 1 &&
		float64(limit.Burst) <= limit.Rate*maxWindowSeconds) {
		if err := limit.Validate(); err != nil {
			return rule{}, err
		}
	}
	if cost < 1 || cost > limit.Burst {
		return rule{}, limit.CheckCost(cost)
	}
	interval := limit.TokenInterval()
	tolerance := limit.Burst * interval
	return rule{interval: interval, tolerance: tolerance, scale: scaleOf(tolerance)}, nil
}

// A ruleCache holds the rules of the limits a Store has seen, so that a
// Take under a known limit skips newRule's checks and its division, a tenth
// of a hot-key Take. An entry is filled once and never replaced: after the
// first Takes of a limit nothing allocates, and the entries' cache lines
// are only ever read. A limit whose entry holds another limit gets its rule
// computed each time, as every limit did before.
type ruleCache [ruleCacheSize]atomic.Pointer[cachedRule]

const (
	ruleCacheBits = 6
	ruleCacheSize = 1 << ruleCacheBits
)

type cachedRule struct {
	limit tollgate.Limit
	rule  rule
}

// get returns the rule of limit, validating limit and cost as newRule does.
func (c *ruleCache) get(limit tollgate.Limit, cost int64) (rule, error) {
	if ce := c.find(limit, cost); ce != nil {
		return ce.rule, nil
	}
	return c.fill(limit, cost)
}

// find returns the entry of limit, or nil, for a cost that limit allows.
// It is get without its call, small enough to be inlined.
func (c *ruleCache) find(limit tollgate.Limit, cost int64) *cachedRule {
	ce := c[ruleIndex(limit)].Load()
	if ce != nil && ce.limit == limit && uint64(cost-1) < uint64(limit.Burst) {
		return ce
	}
	return nil
}

func ruleIndex(limit tollgate.Limit) uint64 {
	return (math.Float64bits(limit.Rate) ^ uint64(limit.Burst)) * 0x9e3779b97f4a7c15 >> (64 - ruleCacheBits)
}

// fill computes the rule that find did not find, and keeps it if its
// entry is empty.
func (c *ruleCache) fill(limit tollgate.Limit, cost int64) (rule, error) {
	r, err := newRule(limit, cost)
	if e := &c[ruleIndex(limit)]; err == nil && e.Load() == nil {
		e.CompareAndSwap(nil, &cachedRule{limit: limit, rule: r})
	}
	return r, err
}

// take decides a request of cost tokens at now on a bucket in state w. It
// returns the state to store and the Result; a denial returns w with the
// throttled flag set. It decides exactly as tollgate.GCRA does.
func (r *rule) take(w, now, cost int64) (int64, tollgate.Result) {
	debt := max(w&tatMask-now, 0) // how far the bucket is from full
	ahead := debt + cost*r.interval
	if ahead > r.tolerance {
		return w | throttledBit, r.denial(debt, ahead)
	}
	return r.scale | (now + ahead), tollgate.Result{
		Allowed:    true,
		Remaining:  (r.tolerance - ahead) / r.interval,
		ResetAfter: micros(ahead),
	}
}

// denial is the Result of a denied request, for a bucket debt µs from full
// that the request would have put ahead µs from full.
func (r *rule) denial(debt, ahead int64) tollgate.Result {
	// After a downgrade the debt can exceed the new tolerance: the bucket
	// is then empty, not negative.
	return tollgate.Result{
		Remaining:  max(r.tolerance-debt, 0) / r.interval,
		RetryAfter: micros(ahead - r.tolerance),
		ResetAfter: micros(debt),
	}
}

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// scaleOf rounds tolerance up to (4+m)·2^e with m < 4, and returns e<<2 | m
// in its place in a word. For a valid limit (tolerance < 2^53) e<<2 | m
// stays below 2^8, so the word stays positive.
//
// (4+m)·2^e is a float64 with two bits of mantissa: the code is the top
// bits of tolerance as a float64 (exact below 2^53), rounded up by adding
// the mantissa bits below them, less the exponent's bias.
func scaleOf(tolerance int64) int64 {
	const dropped = 52 - 2 // mantissa bits below the two kept
	b := math.Float64bits(float64(max(tolerance, 4)))
	code := (b+1<<dropped-1)>>dropped - (1023+2)<<2
	return int64(code) << scaleShift
}

// invScales[c] is 1 / the tolerance that scale code c stands for.
var invScales = func() (t [256]float64) {
	for c := range t {
		t[c] = 1 / math.Ldexp(float64(4+c&3), c>>2)
	}
	return t
}()

// spent estimates the share of its burst that the bucket in state w has
// spent at now: 0 when full, 1 when empty, more after a downgrade. The
// estimate is low by less than a fifth (the scale is rounded up by less than
// a quarter), never high.
func spent(w, now int64) float64 {
	debt := w&tatMask - now
	if debt <= 0 {
		return 0
	}
	return float64(debt) * invScales[uint64(w)>>scaleShift]
}
