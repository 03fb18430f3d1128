package tollgate

import (
	"sync/atomic"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/hooks"
)

// A clock reads the time of decisions with one read of the monotonic clock
// (time.Since of a reading that has one) instead of the two of time.Now, the
// wall clock's and the monotonic one's: the wall time is an anchor's plus
// the time elapsed since. The anchor is renewed every second, so a step of
// the wall clock shows within a second.
type clock struct {
	anchor atomic.Pointer[time.Time]
}

func (c *clock) init() { c.renew() }

func (c *clock) renew() time.Time {
	now := time.Now()
	c.anchor.Store(&now)
	return now
}

// now returns the current time, with both wall and monotonic readings.
func (c *clock) now() time.Time {
	a := c.anchor.Load()
	if elapsed := time.Since(*a); elapsed < time.Second {
		return a.Add(elapsed)
	}
	return c.renew()
}

func init() {
	hooks.LimiterClock = func(now func() time.Time) any { return withClock(now) }
	hooks.PolicyMemo = func(d any) *atomic.Value {
		if rs := d.(*Decision).rules; rs != nil {
			return &rs.memo
		}
		return nil
	}
}
