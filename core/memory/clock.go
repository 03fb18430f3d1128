package memory

import (
	"time"
	_ "unsafe" // for go:linkname
)

// nanotime is the runtime's monotonic clock, the reading time.Now and
// time.Since take, without the time.Time around it: about 2 ns less a read
// (docs/performance.md). The runtime keeps this symbol open to packages
// outside the standard library (go.dev/issue/67401).
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
	return clock{base: time.Now(), baseNano: nanotime()}
}

// now reads the clock.
func (c *clock) now() int64 {
	if c.test != nil {
		return c.at(c.test())
	}
	return clamp((nanotime() - c.baseNano) / 1000)
}

// at converts t, which should carry a monotonic reading, to the Store's
// time. Times before the Store was made count as its first microsecond.
func (c *clock) at(t time.Time) int64 {
	return clamp(t.Sub(c.base).Microseconds())
}

func clamp(us int64) int64 {
	return min(max(us, 0), maxNow)
}
