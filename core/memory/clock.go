package memory

import (
	"time"

	"github.com/tollgate-go/tollgate/core/internal/tsc"
)

// maxNow is the latest time a Store can represent, some 285 years after
// its clock's origin: every TAT, at most a tolerance (< 2^53 µs for a valid
// limit) past now, then stays below 2^54, the bits a word gives it.
const maxNow = 1<<54 - 1<<53 - 1

// A clock gives a Store's time in whole microseconds since an origin:
// tsc's, for the monotonic clock, which every Store shares (and the Limiter
// reads its time from), or the Store's making for a clock given WithClock.
type clock struct {
	base time.Time        // the origin, with a monotonic reading
	test func() time.Time // WithClock's clock, or nil
}

func newClock(test func() time.Time) clock {
	if test != nil {
		return clock{base: test(), test: test}
	}
	return clock{base: tsc.Origin()}
}

// now reads the clock.
func (c *clock) now() int64 {
	if c.test != nil {
		return c.at(c.test())
	}
	return monoMicros()
}

// at converts t, which should carry a monotonic reading, to the Store's
// time. Times before the origin count as its first microsecond.
func (c *clock) at(t time.Time) int64 {
	return clamp(t.Sub(c.base).Microseconds())
}

func clamp(us int64) int64 {
	return min(max(us, 0), maxNow)
}

// monoMicros reads the monotonic clock: the runtime's, through the CPU's
// counter where the kernel keeps its clock on it (package tsc and
// docs/performance.md tell why and what that costs).
func monoMicros() int64 {
	return min(tsc.Micros(), maxNow)
}
