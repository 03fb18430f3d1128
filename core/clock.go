package tollgate

import (
	"sync/atomic"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/tsc"
)

// A fastClock reads the time with one monotonic clock read instead of the
// two (wall and monotonic) of time.Now, which on virtual machines can cost
// more than the rest of a rate-limit decision; the monotonic read is
// package tsc's, through the CPU's counter where the kernel's clock is on
// it. The wall time is the anchor's plus the monotonic time elapsed since;
// the anchor is renewed every second, so wall-clock steps and drift show up
// within a second.
type fastClock struct {
	anchor atomic.Pointer[clockAnchor]
}

// A clockAnchor is a time.Now reading and tsc's reading at the same
// instant.
type clockAnchor struct {
	t  time.Time
	ns int64
}

const anchorLifetime = time.Second

func newFastClock() *fastClock {
	c := &fastClock{}
	c.renew()
	return c
}

func (c *fastClock) renew() time.Time {
	now := time.Now()
	c.anchor.Store(&clockAnchor{t: now, ns: tsc.Nanos()})
	return now
}

// now returns the current time, with both wall and monotonic readings.
func (c *fastClock) now() time.Time {
	a := c.anchor.Load()
	elapsed := time.Duration(tsc.Nanos() - a.ns)
	if elapsed < anchorLifetime {
		return a.t.Add(elapsed)
	}
	return c.renew()
}
