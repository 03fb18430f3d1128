package tollgate

import (
	"testing"
	"time"
)

// BenchmarkFastClock times the Limiter's read of the time (a fastClock)
// beside what it stands in for: time.Now, and the anchor plus time.Since
// that it read before it went through package tsc (docs/performance.md).
func BenchmarkFastClock(b *testing.B) {
	var sink time.Time
	b.Run("read=fastClock", func(b *testing.B) {
		c := newFastClock()
		for b.Loop() {
			sink = c.now()
		}
	})
	b.Run("read=anchor+time.Since", func(b *testing.B) {
		a := time.Now()
		for b.Loop() {
			sink = a.Add(time.Since(a))
		}
	})
	b.Run("read=time.Now", func(b *testing.B) {
		for b.Loop() {
			sink = time.Now()
		}
	})
	_ = sink
}

// TestFastClockFollowsTimeNow: the fastClock's time stays within a
// millisecond of time.Now, wall and monotonic, across anchor renewals.
func TestFastClockFollowsTimeNow(t *testing.T) {
	if testing.Short() {
		t.Skip("reads the clock for 1.2 s")
	}
	c := newFastClock()
	deadline := time.Now().Add(1200 * time.Millisecond)
	for i := 0; time.Now().Before(deadline); i++ {
		before := time.Now()
		got := c.now()
		after := time.Now()
		if got.Sub(before) < -time.Millisecond || got.Sub(after) > time.Millisecond {
			t.Fatalf("read %d: %v, not within a millisecond of [%v, %v] (monotonic)", i, got, before, after)
		}
		if w := got.UnixNano(); w < before.UnixNano()-1e6 || w > after.UnixNano()+1e6 {
			t.Fatalf("read %d: wall %d, not within a millisecond of [%d, %d]", i, w, before.UnixNano(), after.UnixNano())
		}
	}
}
