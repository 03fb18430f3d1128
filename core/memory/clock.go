package memory

import "time"

// A clock gives the Store's time: token buckets count whole microseconds
// since an origin, quotas follow the wall clock. The origin falls on a whole
// microsecond of the wall clock, so that a time in the Store's count is
// exactly its wall time in microseconds less the origin's, as the reference
// model counts.
type clock struct {
	origin time.Time        // with a monotonic reading, unless from a test clock
	read   func() time.Time // the test clock, or nil for the system clock
}

func newClock(read func() time.Time) clock {
	now := time.Now()
	if read != nil {
		now = read()
	}
	// Add keeps the monotonic reading, which Truncate would strip.
	return clock{origin: now.Add(-time.Duration(now.Nanosecond() % 1000)), read: read}
}

// now returns the current time in microseconds since the origin: one read
// of the monotonic clock, the one read a Take makes.
func (c *clock) now() int64 {
	if c.read != nil {
		return c.at(c.read())
	}
	return c.sinceOrigin()
}

// sinceOrigin is now on the system clock: small enough for Go to inline,
// which now is not.
func (c *clock) sinceOrigin() int64 { return int64(time.Since(c.origin) / time.Microsecond) }

// at returns t in microseconds since the origin, rounded down.
func (c *clock) at(t time.Time) int64 {
	d := t.Sub(c.origin)
	us := int64(d / time.Microsecond)
	if d%time.Microsecond < 0 {
		us--
	}
	return us
}

// wallNow returns the current time with its wall reading, for quotas.
func (c *clock) wallNow() time.Time {
	if c.read != nil {
		return c.read()
	}
	return time.Now()
}

// opTime returns the time an Op is decided at: its Now if set, or the
// clock's.
func (c *clock) opTime(now time.Time) (int64, time.Time) {
	if now.IsZero() {
		now = c.wallNow()
	}
	return c.at(now), now
}

// bucketTime returns the time a token bucket, or a lease, is decided at:
// now in microseconds since the origin, or the clock's current time if now
// is zero, with one read of the monotonic clock.
func (c *clock) bucketTime(now time.Time) int64 {
	if now.IsZero() {
		return c.now()
	}
	return c.at(now)
}
