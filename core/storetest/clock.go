package storetest

import (
	"sync/atomic"
	"time"
)

// A Clock is a manual clock for tests: it stands still until Advance moves
// it. It is safe for concurrent use and takes no lock, so that it does not
// serialise the goroutines of a concurrency test. The zero Clock is not
// usable; call NewClock.
type Clock struct {
	start   time.Time
	elapsed atomic.Int64 // nanoseconds since start
}

// NewClock returns a Clock set to a fixed instant, 2026-01-01 00:00:00 UTC.
func NewClock() *Clock { return NewClockAt(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) }

// NewClockAt returns a Clock set to t.
func NewClockAt(t time.Time) *Clock { return &Clock{start: t} }

// Now returns the clock's current time.
func (c *Clock) Now() time.Time { return c.start.Add(time.Duration(c.elapsed.Load())) }

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) { c.elapsed.Add(int64(d)) }

// Set moves the clock to t, forward or back.
func (c *Clock) Set(t time.Time) { c.elapsed.Store(int64(t.Sub(c.start))) }
