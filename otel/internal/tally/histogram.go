package tally

import (
	"sync/atomic"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
)

// A Histogram counts durations in buckets of plain atomic counters: one
// bucket add and one sum add per observation, against the several that a
// general-purpose histogram spends on consistent snapshots. A scrape that
// races with observations may see a sum a few observations ahead of or
// behind the counts, which no rate over time notices. (Store latencies are
// counted in the series instead; see Tally.Latency.)
type Histogram struct {
	bounds []time.Duration // upper bounds, inclusive, increasing
	counts []atomic.Uint64 // one per bound, and one past the last
	sum    atomic.Int64    // nanoseconds
}

// NewHistogram returns a Histogram with the upper bounds given, in
// increasing order.
func NewHistogram(bounds []time.Duration) *Histogram {
	return &Histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds)+1)}
}

// Observe counts d.
func (h *Histogram) Observe(d time.Duration) {
	h.counts[bucket(h.bounds, d)].Add(1)
	h.sum.Add(int64(d))
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

// Snapshot returns the state of h.
func (h *Histogram) Snapshot() Snapshot {
	buckets := make([]uint64, len(h.counts))
	for i := range h.counts {
		buckets[i] = h.counts[i].Load()
	}
	return snapshot(h.bounds, buckets, time.Duration(h.sum.Load()))
}

// snapshot makes a Snapshot of bucket counts (one per bound and one past
// the last) and their sum.
func snapshot(bounds []time.Duration, buckets []uint64, sum time.Duration) Snapshot {
	s := Snapshot{Bounds: make([]float64, len(bounds)), Cumulative: make([]uint64, len(bounds)), Sum: sum.Seconds()}
	for i, d := range bounds {
		s.Bounds[i] = d.Seconds()
		s.Count += buckets[i]
		s.Cumulative[i] = s.Count
	}
	s.Count += buckets[len(bounds)]
	return s
}

// LatencyBounds returns the store latency buckets for a store timeout:
// from timeout/2000 to twice the timeout, in 1-2.5-5 steps, so that half
// the timeout and the timeout are bounds. For the default 50 ms: 25 µs,
// 50 µs, 100 µs, ... 50 ms, 100 ms. A memory store answers within the
// first; a Redis round trip lands in the middle; timeouts land at the
// timeout.
func LatencyBounds(timeout time.Duration) []time.Duration {
	if timeout <= 0 {
		timeout = tollgate.DefaultStoreTimeout
	}
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
