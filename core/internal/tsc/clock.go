// Package tsc is the monotonic clock of tollgate's hot paths: the
// runtime's monotonic clock, read through the CPU's time-stamp counter
// where the kernel keeps its own clock on it (clocksource tsc), which costs
// a third of the runtime's read on the VMs of docs/performance.md.
package tsc

import (
	"math/bits"
	"os"
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

// Nanotime is the runtime's monotonic clock in nanoseconds, as time.Since
// reads it.
func Nanotime() int64 { return nanotime() }

// Counter reads the CPU's time-stamp counter out of order with the loads
// before it, as the clock does; CounterOrdered waits for them, as the
// kernel's clock does. Both return 0 where there is no counter.
func Counter() int64 { return rdtsc() }

// CounterOrdered is Counter after every load before it.
func CounterOrdered() int64 { return rdtscOrdered() }

// Micros returns the whole microseconds since Origin.
func Micros() int64 { return mono.micros() }

// Nanos returns the nanoseconds since Origin, on the same clock as Micros.
func Nanos() int64 { return mono.nanos() }

// Origin returns the instant the clock counts from, read by time.Now (so
// with a monotonic reading) when the clock was first read.
func Origin() time.Time {
	mono.startOnce.Do(mono.start)
	return mono.origin
}

// maxMicros caps a reading, some 146 years after the origin, so that it
// stays in an int64 as nanoseconds.
const maxMicros = 1<<62/1000 - 1

// FirstCalibration is how long after its origin the clock starts reading
// the counter; it reads the runtime's clock until then.
const FirstCalibration = tscFirstCalibration

// mono is the runtime's monotonic clock in microseconds since an origin,
// read through the CPU's time-stamp counter where the kernel keeps its own
// clock on it (clocksource tsc): a bare counter read costs 10 ns where the
// runtime's clock, which waits for every load before it, costs 25 on the
// AMD VM of docs/performance.md, most of a hot-key Take.
//
// The counter is read out of order with the loads before it, so a reading
// can fall a few microseconds behind one another CPU published before it
// (BenchmarkClockAcrossCPUs). A decision on such a reading is one made a
// few microseconds earlier, as the Limiter's are, which read the time
// before resolving the plan: it can only deny a request that would have
// had its tokens those microseconds later. TestMonoInStepAcrossCPUs bounds
// the lag.
//
// The counter is converted with a rate measured against the runtime's
// clock 100 ms after the origin and every second from then on, and it never
// steps: each new rate starts where the previous one reads, and is slewed
// by the difference to the runtime's clock (which NTP slews too) so that
// the two meet one second later. The recalibration, a Take's once a
// second, also reads the kernel's clock source; the counter is turned off
// for good when the kernel has left it, or the runtime's clock runs a
// fifth away from the counter's rate; the runtime's clock then takes over
// at the counter's reading, not behind it.
var mono tscClock

type tscClock struct {
	startOnce  sync.Once
	origin     time.Time // micros counts from here
	originNano int64     // nanotime() at origin, within a few ns

	anchor atomic.Pointer[tscAnchor] // calibrated; nil while not, or off
	state  atomic.Int32
	offNs  atomic.Int64 // added to the runtime's clock once the counter is off
	mu     sync.Mutex   // held by the goroutine that measures
	last   *tscAnchor   // the anchor to measure from, calibrated or not; guarded by mu
}

// A tscAnchor is a counter reading and the runtime's clock at the same
// instant, the rate measured up to it, and what the clock reads at it. It
// is never changed once published.
type tscAnchor struct {
	tsc int64 // a counter reading
	ns  int64 // nanotime() at the same instant

	// the clock's reading at tsc, in whole microseconds since the origin
	// and a fraction of 2^64
	us     int64
	usFrac uint64

	rate      uint64 // measured microseconds a tick, a fraction of 2^64; 0 when not measured yet
	usPerTick uint64 // rate, slewed: what the clock advances by a tick
	span      uint64 // ticks after tsc when to measure again
}

// at returns the clock's reading d ticks after the anchor, in whole
// microseconds and a fraction of 2^64. The slew ends with the span: past
// it, where the clock has met the runtime's, it runs at the measured rate,
// so that a store idle for hours does not carry the slew along.
func (a *tscAnchor) at(d uint64) (us int64, frac uint64) {
	hi, lo := bits.Mul64(min(d, a.span), a.usPerTick)
	if d > a.span {
		h, l := bits.Mul64(d-a.span, a.rate)
		var c uint64
		lo, c = bits.Add64(lo, l, 0)
		hi += h + c
	}
	frac, carry := bits.Add64(lo, a.usFrac, 0)
	return a.us + int64(min(hi+carry, maxMicros)), frac
}

const (
	tscUnstarted = iota
	tscOff
	tscOn

	// The first rate is measured over 100 ms: a pair of readings is
	// uncertain by up to tscPairTicks, which over 100 ms is 2e-5 of the
	// rate at 1 GHz, 20 µs by the first recalibration a second later.
	tscFirstCalibration = 100 * time.Millisecond
	tscRecalibration    = time.Second

	// tscPairTicks bounds the ticks between the two counter readings
	// around a clock reading (0.2 µs at 10 GHz, 2 µs at 1 GHz; a pair
	// takes about 0.05 µs when the goroutine is not held up).
	tscPairTicks = 2_000

	// tscMaxSlew bounds the difference to the runtime's clock that one
	// recalibration takes out, in ns: a hundredth of its period, so that
	// the clock keeps up with NTP slewing the runtime's.
	tscMaxSlew = int64(tscRecalibration / 100)

	// The runtime's clock may run from what the last rate predicts by
	// 1/tscMaxDrift of the time measured before the counter is taken for
	// broken: NTP daemons slew the kernel's clock by up to a tenth; a
	// counter that changed its rate is further off.
	tscMaxDrift = 5
)

func (c *tscClock) start() {
	c.origin = time.Now()
	c.originNano = nanotime()
	if !tscUsable() || !kernelOnTSC() {
		c.state.Store(tscOff)
		return
	}
	for range 3 { // a pair fails when the goroutine is held up
		if _, t, n, ok := tscPair(); ok {
			c.last = &tscAnchor{tsc: t, ns: n}
			c.state.Store(tscOn)
			return
		}
	}
	c.state.Store(tscOff)
}

// tscPair reads the counter and the runtime's clock at one instant: a pair
// of readings is only as good as the time between them, so the counter is
// read on both sides, and the pair refused if the goroutine was held up in
// between. tsc is the middle of the two readings, before the first.
func tscPair() (before, tsc, ns int64, ok bool) {
	before = rdtsc()
	ns = nanotime()
	after := rdtsc()
	return before, before + (after-before)/2, ns, after-before <= tscPairTicks
}

// micros returns the whole microseconds since the origin: from the counter
// when it is calibrated, else from the runtime's clock.
func (c *tscClock) micros() int64 {
	if a := c.anchor.Load(); a != nil {
		if d := uint64(rdtsc() - a.tsc); d <= a.span {
			// at(d) within the span, without its branch for beyond it.
			hi, lo := bits.Mul64(d, a.usPerTick)
			_, carry := bits.Add64(lo, a.usFrac, 0)
			return min(a.us+int64(hi+carry), maxMicros)
		}
	} else if c.state.Load() == tscOff {
		return c.runtimeMicros(nanotime())
	}
	us, _ := c.slow()
	return us
}

// nanos is micros in nanoseconds.
func (c *tscClock) nanos() int64 {
	if a := c.anchor.Load(); a != nil {
		if d := uint64(rdtsc() - a.tsc); d <= a.span {
			hi, lo := bits.Mul64(d, a.usPerTick)
			frac, carry := bits.Add64(lo, a.usFrac, 0)
			return (a.us+int64(hi+carry))*1000 + fracNanos(frac)
		}
	} else if c.state.Load() == tscOff {
		return c.runtimeNanos(nanotime())
	}
	us, frac := c.slow()
	return us*1000 + fracNanos(frac)
}

// fracNanos converts a fraction of a microsecond, in 2^-64, to whole
// nanoseconds.
func fracNanos(frac uint64) int64 {
	return int64((frac >> 32) * 1000 >> 32)
}

// slow reads the clock when the anchor is older than its span, or there is
// none: it starts the clock if no read has, measures the counter anew if no
// other goroutine is at it, and reads from the latest anchor still, so
// that the clock does not step to the runtime's. It returns whole
// microseconds and a fraction of 2^64.
func (c *tscClock) slow() (int64, uint64) {
	c.startOnce.Do(c.start)
	n := c.measure()
	if a := c.anchor.Load(); a != nil {
		return a.at(uint64(max(rdtsc()-a.tsc, 0)))
	}
	ns := c.runtimeNanos(n)
	return ns / 1000, uint64(ns%1000) * (1<<64/1000 + 1)
}

// runtimeMicros converts the runtime clock's reading n. That clock never
// reads before the origin, which it read first, so the difference is
// divided unsigned, a step shorter than signed.
func (c *tscClock) runtimeMicros(n int64) int64 {
	return int64(uint64(c.runtimeNanos(n)) / 1000)
}

// runtimeNanos converts the runtime clock's reading n.
func (c *tscClock) runtimeNanos(n int64) int64 {
	return n - c.originNano + c.offNs.Load()
}

// measure reads the runtime's clock and, unless another goroutine is at it,
// measures the counter's rate since the last anchor and anchors it anew.
func (c *tscClock) measure() int64 {
	n := nanotime()
	if c.state.Load() != tscOn || !c.mu.TryLock() {
		return n
	}
	defer c.mu.Unlock()
	before, t, n, ok := tscPair()
	if !ok || c.state.Load() != tscOn {
		return n
	}
	m, span, v := recalibrate(c.last.tsc, c.last.ns, c.last.rate, t, n)
	if v == tscMeasured && !kernelOnTSC() { // once a period, not at every keep
		v = tscBroken
	}
	switch v {
	case tscBroken:
		c.turnOff(t, n)
	case tscMeasured:
		c.last = nextAnchor(c.anchor.Load(), before, t, n-c.originNano, m, span)
		c.last.ns = n
		c.anchor.Store(c.last)
	}
	return n
}

// turnOff hands the clock to the runtime's for good, at counter reading t
// and runtime clock reading n: where the counter's clock read ahead of the
// runtime's, the runtime's is read that far ahead from then on, so that the
// clock does not step back.
func (c *tscClock) turnOff(t, n int64) {
	if a := c.anchor.Load(); a != nil {
		us, frac := a.at(uint64(max(t-a.tsc, 0)))
		c.offNs.Store(max(us*1000+fracNanos(frac)-(n-c.originNano), 0))
	}
	c.state.Store(tscOff)
	c.anchor.Store(nil)
}

// nextAnchor makes the anchor at counter reading t, where the runtime's
// clock read since ns after the origin between counter readings before
// and t, for a measured rate m and its span. The new anchor reads what prev
// reads at t, and advances at m slewed by the difference to the runtime's
// clock, so that it meets that clock a span later. With no prev it starts
// from the runtime's clock, as read at before: never behind what that
// clock read before the counter took over.
func nextAnchor(prev *tscAnchor, before, t, since int64, m, span uint64) *tscAnchor {
	a := &tscAnchor{tsc: t, rate: m, usPerTick: m, span: span}
	if prev == nil {
		first := &tscAnchor{us: since / 1000, rate: m, usPerTick: m, span: span}
		first.usFrac, _ = bits.Div64(uint64(since%1000), 0, 1000)
		a.us, a.usFrac = first.at(uint64(t - before))
		return a
	}
	a.us, a.usFrac = prev.at(uint64(max(t-prev.tsc, 0)))
	ahead := a.us*1000 + fracNanos(a.usFrac) - since
	ahead = min(max(ahead, -tscMaxSlew), tscMaxSlew)
	// usPerTick = m (1 s - ahead) / 1 s
	hi, lo := bits.Mul64(m, uint64(max(ahead, -ahead)))
	adj, _ := bits.Div64(hi, lo, uint64(tscRecalibration))
	if ahead > 0 {
		a.usPerTick = m - adj
	} else {
		a.usPerTick = m + adj
	}
	return a
}

// What recalibrate found.
const (
	tscKeep     = iota // too early to measure, or readings out of order: change nothing
	tscMeasured        // a new rate, from the anchor to now
	tscBroken          // the counter cannot be trusted
)

// recalibrate measures the counter's rate between the anchor (t0, n0) and
// now (t, n), in ticks and nanoseconds, given the rate m measured before (0
// for none), in microseconds a tick as a fraction of 2^64. It returns the
// new rate and the ticks of one recalibration period.
func recalibrate(t0, n0 int64, m uint64, t, n int64) (usPerTick, span uint64, verdict int) {
	dt, dn := t-t0, n-n0
	switch {
	case dt <= 0 || dn < 0:
		// A reading on another CPU taken a hair before the anchor's:
		// the counter is not read in order with memory.
		return 0, 0, tscKeep
	case m == 0 && dn < int64(tscFirstCalibration), m != 0 && dn < int64(tscRecalibration/2):
		// Too short to measure a rate on. A reading a hair behind the
		// anchor's, on another CPU, comes here through the slow path
		// right after a recalibration: the pair's few µs of uncertainty
		// over so short a time would make the new rate anything.
		return 0, 0, tscKeep
	case m != 0:
		// What the old rate says of the time since the anchor, in ns.
		hi, lo := bits.Mul64(uint64(dt), m)
		predicted := int64(hi*1000 + (lo>>32)*1000>>32)
		if drift := predicted - dn; max(drift, -drift) > dn/tscMaxDrift+1000 {
			return 0, 0, tscBroken
		}
	}
	for dt > 1<<50 { // weeks without a Take: keep 1000 dt below 2^63
		dt, dn = dt>>1, dn>>1
	}
	// A rate no counter has: 1 MHz or less, or over 100 GHz.
	if dn/1000 >= dt || dt/100 > dn {
		return 0, 0, tscBroken
	}
	// usPerTick = dn / (1000 dt) as a fraction of 2^64; dn < 1000 dt.
	usPerTick, _ = bits.Div64(uint64(dn), 0, 1000*uint64(dt))
	if usPerTick == 0 {
		return 0, 0, tscBroken
	}
	// span = 1 s in ticks = 1e6 µs / usPerTick.
	span, _ = bits.Div64(uint64(tscRecalibration/time.Microsecond), 0, usPerTick)
	return usPerTick, span, tscMeasured
}

// kernelOnTSC reports whether the kernel keeps its clock on the
// time-stamp counter, which it does only once it has found the counters of
// all CPUs in step, and stops doing when its watchdog finds the counter
// unstable. Not so under kvm-clock: on such a VM the counters of two vCPUs
// were measured up to 55 µs apart (BenchmarkClockAcrossCPUs).
func kernelOnTSC() bool {
	src, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	return err == nil && string(src) == "tsc\n"
}
