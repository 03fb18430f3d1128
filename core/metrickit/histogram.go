package metrickit

import (
	"math"
	"sync/atomic"
	"time"
)

// A histogram counts durations in buckets of plain atomic counters: one
// bucket add and one sum add per observation, against the several that a
// general-purpose histogram spends on consistent snapshots. A scrape that
// races with observations may see a sum a few observations ahead of or
// behind the counts, which no rate over time notices. (Store latencies are
// counted in the series instead; see Tally.Latency.)
type histogram struct {
	bounds []time.Duration // upper bounds, inclusive, increasing
	counts []atomic.Uint64 // one per bound, and one past the last
	sum    atomic.Uint64   // nanoseconds, saturating
}

func newHistogram(bounds []time.Duration) *histogram {
	return &histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds)+1)}
}

// observe counts d.
func (h *histogram) observe(d time.Duration) {
	h.counts[bucket(h.bounds, d)].Add(1)
	addSaturating(&h.sum, uint64(max(d, 0)))
}

// addSaturating adds n to c, stopping at the largest uint64 rather than
// wrapping to a small count, which a rate would read as a counter reset.
// It is for the counts that a large cost or delay can swell: the
// compare-and-swap loop is dearer than an Add.
func addSaturating(c *atomic.Uint64, n uint64) {
	for {
		old := c.Load()
		sum := old + n
		if sum < old {
			sum = math.MaxUint64
		}
		if c.CompareAndSwap(old, sum) {
			return
		}
	}
}

// bucket returns the index of the bucket of d under bounds: the first bound
// d does not exceed, or len(bounds).
func bucket(bounds []time.Duration, d time.Duration) int {
	i := 0
	for i < len(bounds) && d > bounds[i] {
		i++
	}
	return i
}

// A Snapshot is a histogram read at one moment.
type Snapshot struct {
	Bounds     []float64 // upper bounds of the buckets, in seconds
	Cumulative []uint64  // observations at or below each bound
	Count      uint64    // all observations
	Sum        float64   // their sum, in seconds
}

// snapshot returns the state of h.
func (h *histogram) snapshot() Snapshot {
	buckets := make([]uint64, len(h.counts))
	for i := range h.counts {
		buckets[i] = h.counts[i].Load()
	}
	return snapshot(h.bounds, buckets, float64(h.sum.Load())/1e9)
}

// snapshot makes a Snapshot of bucket counts (one per bound and one past
// the last) and their sum in seconds.
func snapshot(bounds []time.Duration, buckets []uint64, sum float64) Snapshot {
	s := Snapshot{Bounds: Seconds(bounds), Cumulative: make([]uint64, len(bounds)), Sum: sum}
	for i := range bounds {
		s.Count += buckets[i]
		s.Cumulative[i] = s.Count
	}
	s.Count += buckets[len(bounds)]
	return s
}

// Seconds returns durations in seconds.
func Seconds(ds []time.Duration) []float64 {
	s := make([]float64, len(ds))
	for i, d := range ds {
		s[i] = d.Seconds()
	}
	return s
}

// LatencyBounds returns the store latency buckets for a store timeout:
// from timeout/2000 to twice the timeout, in 1-2.5-5 steps, so that half
// the timeout and the timeout are bounds. For 50 ms: 25 µs, 50 µs, 100 µs,
// ... 50 ms, 100 ms. A Redis round trip lands in the middle; timeouts land
// at the timeout.
func LatencyBounds(timeout time.Duration) []time.Duration {
	steps := []struct{ num, den int64 }{
		{1, 2000}, {1, 1000}, {1, 500}, {1, 200}, {1, 100}, {1, 50},
		{1, 20}, {1, 10}, {1, 5}, {1, 2}, {1, 1}, {2, 1},
	}
	b := make([]time.Duration, 0, len(steps))
	for _, s := range steps {
		d := time.Duration(int64(timeout) * s.num / s.den)
		if len(b) == 0 || d > b[len(b)-1] {
			b = append(b, d)
		}
	}
	return b
}

// DelayBounds are the buckets of the delays that reservations
// (tollgate.Request.MaxDelay) impose: 1 ms to 10 s.
var DelayBounds = []time.Duration{
	time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond,
	50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second,
}
