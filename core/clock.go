package tollgate

import (
	"sync/atomic"
	"time"
)

// A fastClock reads the time with one monotonic clock read instead of the
// two (wall and monotonic) of time.Now, which on virtual machines can cost
// more than the rest of a rate-limit decision. The wall time is the anchor's
// plus the monotonic time elapsed since; the anchor is renewed every second,
// so wall-clock steps and drift show up within a second.
type fastClock struct {
	anchor atomic.Pointer[time.Time]
}

const anchorLifetime = time.Second

func newFastClock() *fastClock {
	c := &fastClock{}
	now := time.Now()
	c.anchor.Store(&now)
	return c
}

// now returns the current time, with both wall and monotonic readings.
func (c *fastClock) now() time.Time {
	a := c.anchor.Load()
	elapsed := time.Since(*a)
	if elapsed < anchorLifetime {
		return a.Add(elapsed)
	}
	now := time.Now()
	c.anchor.Store(&now)
	return now
}
