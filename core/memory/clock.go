package memory

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
	_ "unsafe" // for go:linkname
)

// nanotime is the runtime's monotonic clock, the reading time.Now and
// time.Since take, without the time.Time around it. The runtime keeps this
// symbol open to packages outside the standard library (go.dev/issue/67401).
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

// maxNow is the latest time a Store can represent, some 285 years after it
// was made: every TAT, at most a tolerance (< 2^53 µs for a valid limit)
// past now, then stays below 2^54, the bits a word gives it.
const maxNow = 1<<54 - 1<<53 - 1

// A clock gives a Store's time in whole microseconds since the Store was
// made.
type clock struct {
	base     time.Time        // when the Store was made, with a monotonic reading
	baseNano int64            // nanotime() at base, within a few ns
	test     func() time.Time // WithClock's clock, or nil
}

func newClock(test func() time.Time) clock {
	if test != nil {
		return clock{base: test(), test: test}
	}
	startMono.Do(mono.start)
	return clock{base: time.Now(), baseNano: nanotime()}
}

// now reads the clock.
func (c *clock) now() int64 {
	if c.test != nil {
		return c.at(c.test())
	}
	return mono.since(c.baseNano)
}

// at converts t, which should carry a monotonic reading, to the Store's
// time. Times before the Store was made count as its first microsecond.
func (c *clock) at(t time.Time) int64 {
	return clamp(t.Sub(c.base).Microseconds())
}

func clamp(us int64) int64 {
	return min(max(us, 0), maxNow)
}

// mono is the runtime's monotonic clock, read through the CPU's time-stamp
// counter where that is safe: a counter read costs about 9 ns where the
// runtime's clock costs 22 (docs/performance.md). The counter is converted
// to nanoseconds with a rate measured against the runtime's clock and
// measured again every second; a rate that drifts by more than a thousandth
// between two measures turns the counter off for good.
var (
	mono      tscClock
	startMono sync.Once
)

type tscClock struct {
	// A seqlock: odd while a writer changes the fields below, which
	// readers then do not use.
	seq   atomic.Uint64
	mult  atomic.Uint64 // ns per tick, 32.32 fixed point; 0 while not calibrated or off
	tsc0  atomic.Int64  // the anchor: a counter reading...
	ns0   atomic.Int64  // ...and nanotime() at the same instant
	span  atomic.Uint64 // ticks from the anchor after which to measure again
	state atomic.Int32
}

const (
	tscOff = iota
	tscOn

	tscFirstCalibration = 10 * time.Millisecond
	tscRecalibration    = time.Second

	// tscPairTicks bounds the ticks between the two counter readings
	// around a clock reading (about 1 µs at 10 GHz, 10 µs at 1 GHz).
	tscPairTicks = 10_000
)

func (c *tscClock) start() {
	if !tscUsable() {
		return
	}
	before := rdtsc()
	n := nanotime()
	after := rdtsc()
	c.tsc0.Store(before + (after-before)/2)
	c.ns0.Store(n)
	c.state.Store(tscOn)
}

// since returns the whole microseconds since base, a nanotime reading, as
// a Store's time: from the counter when it is calibrated, else from the
// runtime's clock.
func (c *tscClock) since(base int64) int64 {
	s := c.seq.Load()
	m := c.mult.Load()
	if m == 0 {
		return clamp((c.measure() - base) / 1000)
	}
	t0, n0, span := c.tsc0.Load(), c.ns0.Load(), c.span.Load()
	d := uint64(rdtsc() - t0)
	if d > span || s&1 != 0 || c.seq.Load() != s {
		return clamp((c.measure() - base) / 1000)
	}
	hi, lo := bits.Mul64(d, m)
	return clamp((n0 + int64(hi<<32|lo>>32) - base) / 1000)
}

// measure reads the runtime's clock and, if it can take the seqlock,
// measures the counter's rate since the anchor and moves the anchor to now.
func (c *tscClock) measure() int64 {
	n := nanotime()
	if c.state.Load() != tscOn {
		return n
	}
	s := c.seq.Load()
	if s&1 != 0 || !c.seq.CompareAndSwap(s, s+1) {
		return n // another goroutine is at it
	}
	defer c.seq.Add(1)
	// A pair of readings is only as good as the time between them:
	// take the counter on both sides of the runtime's clock, and skip
	// the measure if the goroutine was held up in between.
	before := rdtsc()
	n = nanotime()
	after := rdtsc()
	if after-before > tscPairTicks {
		return n
	}
	t := before + (after-before)/2
	switch m, span, v := recalibrate(c.tsc0.Load(), c.ns0.Load(), c.mult.Load(), t, n); v {
	case tscKeep:
	case tscBroken:
		c.turnOff()
	case tscMeasured:
		c.tsc0.Store(t)
		c.ns0.Store(n)
		c.span.Store(span)
		c.mult.Store(m)
	}
	return n
}

// What recalibrate found.
const (
	tscKeep     = iota // too early to measure, or readings out of order: change nothing
	tscMeasured        // a new rate, from the anchor to now
	tscBroken          // the counter cannot be trusted
)

// recalibrate measures the counter's rate between the anchor (t0, n0) and
// now (t, n), in ticks and nanoseconds, given the rate m measured before (0
// for none). It returns the new rate and the ticks of one recalibration
// period.
func recalibrate(t0, n0 int64, m uint64, t, n int64) (mult, span uint64, verdict int) {
	dt, dn := t-t0, n-n0
	switch {
	case dt <= 0 || dn < 0:
		// A reading on another CPU taken a hair before the anchor's:
		// the counter is not read in order with memory.
		return 0, 0, tscKeep
	case m == 0 && dn < int64(tscFirstCalibration):
		return 0, 0, tscKeep
	case m != 0:
		hi, lo := bits.Mul64(uint64(dt), m)
		if drift := n0 + int64(hi<<32|lo>>32) - n; max(drift, -drift) > dn/1000+1000 {
			return 0, 0, tscBroken
		}
	}
	// A rate no counter has: under 1 MHz or over 100 GHz.
	if dn/1000 > dt || dt/100 > dn {
		return 0, 0, tscBroken
	}
	mult, _ = bits.Div64(uint64(dn)>>32, uint64(dn)<<32, uint64(dt))
	if mult == 0 {
		return 0, 0, tscBroken
	}
	span, _ = bits.Div64(0, uint64(tscRecalibration)<<32, mult)
	return mult, span, tscMeasured
}

func (c *tscClock) turnOff() {
	c.state.Store(tscOff)
	c.mult.Store(0)
}
