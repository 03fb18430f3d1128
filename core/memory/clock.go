package memory

import (
	"sync"
	"time"
	_ "unsafe" // for go:linkname
)

// nanotime is the runtime's monotonic clock, the reading time.Now and
// time.Since take, without the time.Time around it. The runtime keeps this
// symbol open to packages outside the standard library (go.dev/issue/67401).
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

// maxNow is the latest time a Store can represent, some 285 years after
// its clock's origin: every TAT, at most a tolerance (< 2^53 µs for a valid
// limit) past now, then stays below 2^54, the bits a word gives it.
const maxNow = 1<<54 - 1<<53 - 1

// A clock gives a Store's time in whole microseconds since an origin: the
// first Store's making for the monotonic clock, which every Store shares,
// or the Store's making for a clock given WithClock.
type clock struct {
	base time.Time        // the origin, with a monotonic reading
	test func() time.Time // WithClock's clock, or nil
}

func newClock(test func() time.Time) clock {
	if test != nil {
		return clock{base: test(), test: test}
	}
	startMono.Do(mono.start)
	return clock{base: mono.origin}
}

// now reads the clock.
func (c *clock) now() int64 {
	if c.test != nil {
		return c.at(c.test())
	}
	return mono.micros()
}

// at converts t, which should carry a monotonic reading, to the Store's
// time. Times before the origin count as its first microsecond.
func (c *clock) at(t time.Time) int64 {
	return clamp(t.Sub(c.base).Microseconds())
}

func clamp(us int64) int64 {
	return min(max(us, 0), maxNow)
}

// mono is the runtime's monotonic clock in microseconds since an origin.
//
// The CPU's time-stamp counter is cheaper to read only out of order: on the
// Intel VM of docs/performance.md a bare RDTSC costs 17 ns, a fenced one 25,
// and nanotime, which fences it, 33. Read out of order, a reading on one CPU
// fell up to 6 µs behind one another CPU had published before it
// (BenchmarkClockAcrossCPUs), and its calibration against the runtime's
// clock once saw drift and stepped back 1 ms; a clock that steps back denies
// requests that have their tokens. So the Store reads the runtime's clock.
var (
	mono      monoClock
	startMono sync.Once
)

type monoClock struct {
	origin     time.Time // micros counts from here
	originNano int64     // nanotime() at origin, within a few ns
}

func (c *monoClock) start() {
	c.origin = time.Now()
	c.originNano = nanotime()
}

// micros returns the whole microseconds since the origin. The runtime's
// clock never reads before the origin, which it read first, so the
// difference is divided unsigned, a step shorter than signed.
func (c *monoClock) micros() int64 {
	return int64(min(uint64(nanotime()-c.originNano)/1000, maxNow))
}
