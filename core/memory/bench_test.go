package memory

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/internal/tsc"
)

// BenchmarkTake is one goroutine taking a token of one tracked key, through
// the tollgate.Store interface, under a limit that never denies: the path
// whose cost docs/performance.md breaks down with BenchmarkTakeParts.
func BenchmarkTake(b *testing.B) {
	s := New()
	defer s.Close()
	var st tollgate.Store = s
	ctx := context.Background()
	lim := tollgate.Limit{Rate: 100, Burst: 1e9}
	st.Take(ctx, "tenant-0", lim, 1)
	key := strings.Clone("tenant-0")
	b.ReportAllocs()
	for b.Loop() {
		st.Take(ctx, key, lim, 1)
	}
}

// BenchmarkTakeParts times each step of BenchmarkTake's Take on its own:
// reading the clock six ways (the CPU's counter read out of order and in
// order, the Store's clock, the runtime's, time.Since, and time.Now, the
// read of sethvargo/go-limiter, which takes the wall clock too), hashing
// the key, preparing the limit (computed, and from the Store's cache of
// rules), a lone compare-and-swap, and the decision on the table at a
// given time (hash, probe, GCRA, compare-and-swap); then the whole Take,
// and TakeAt, which the Limiter calls with the time it has read. Each
// iteration times a block of 256 runs of every step in turn; the metric
// <step>-ns/op is a step's median over the blocks, which a block that was
// descheduled on a busy machine does not move.
func BenchmarkTakeParts(b *testing.B) {
	s := New()
	defer s.Close()
	ctx := context.Background()
	lim := tollgate.Limit{Rate: 100, Burst: 1e9}
	s.Take(ctx, "tenant-0", lim, 1)
	key := strings.Clone("tenant-0")
	for range 3 { // let the counter calibrate
		s.Take(ctx, key, lim, 1)
		time.Sleep(tsc.FirstCalibration)
	}
	var st tollgate.Store = s
	timed := s
	var k lookup
	var word atomic.Int64
	r, _ := newRule(lim, 1)
	now := s.b.clock.now()
	since := time.Now()
	var sink int64
	steps := []struct {
		name string
		run  func()
	}{
		{"clock-rdtsc", func() { sink += tsc.Counter() }},
		{"clock-rdtsc-ordered", func() { sink += tsc.CounterOrdered() }},
		{"clock-store", func() { sink += monoMicros() }},
		{"clock-nanotime", func() { sink += tsc.Nanotime() }},
		{"clock-time.Since", func() { sink += int64(time.Since(since)) }},
		{"clock-time.Now", func() { sink += time.Now().UnixNano() }},
		{"lookup", func() { k.set(s.b.seed, key); sink += int64(k.meta) }},
		{"hash-memhash", func() {
			sink += int64(memhash(unsafe.Pointer(unsafe.StringData(key)), s.b.seed, uintptr(len(key))))
		}},
		{"limit", func() { r, _ := newRule(lim, 1); sink += r.scale }},
		{"limit-cached", func() { r, _ := s.b.rules.get(lim, 1); sink += r.scale }},
		{"cas", func() { w := word.Load(); word.CompareAndSwap(w, w+1) }},
		{"decide", func() { sink += s.b.take(key, 0, &r, 1, now).Remaining }},
		{"take", func() { r, _ := st.Take(ctx, key, lim, 1); sink += r.Remaining }},
		{"take-at", func() { r, _ := timed.TakeAt(ctx, key, lim, 1, since); sink += r.Remaining }},
	}
	const block = 256
	samples := make([][]float64, len(steps))
	for b.Loop() {
		for i, step := range steps {
			start := tsc.Nanotime()
			for range block {
				step.run()
			}
			samples[i] = append(samples[i], float64(tsc.Nanotime()-start)/block)
		}
	}
	for i, step := range steps {
		slices.Sort(samples[i])
		b.ReportMetric(samples[i][len(samples[i])/2], step.name+"-ns/op")
	}
	_ = sink
}

// BenchmarkClockAcrossCPUs reads a clock from GOMAXPROCS goroutines at once
// and reports how far a reading fell behind one that another goroutine
// published before it (worst-back-µs), and the share of readings that did
// (behind/op), for the CPU's counter read out of order and in order, and
// for the Store's clock, which reads the counter out of order where the
// kernel keeps its clock on it (docs/performance.md).
func BenchmarkClockAcrossCPUs(b *testing.B) {
	tsc.Origin() // start the clock
	ticksPerMicro := float64(0)
	if t0, n0 := tsc.Counter(), tsc.Nanotime(); t0 != 0 {
		time.Sleep(10 * time.Millisecond)
		ticksPerMicro = float64(tsc.Counter()-t0) / float64(tsc.Nanotime()-n0) * 1000
	}
	for _, c := range []struct {
		name   string
		read   func() int64
		perMic float64
	}{
		{"counter", tsc.Counter, ticksPerMicro},
		{"counter-ordered", tsc.CounterOrdered, ticksPerMicro},
		{"store", monoMicros, 1},
	} {
		b.Run("clock="+c.name, func(b *testing.B) {
			if c.perMic == 0 {
				b.Skip("no counter on this CPU")
			}
			var latest, worst, behind atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					seen := latest.Load()
					got := c.read()
					if got < seen {
						behind.Add(1)
						raiseTo(&worst, seen-got)
					}
					raiseTo(&latest, got)
				}
			})
			b.ReportMetric(float64(worst.Load())/c.perMic, "worst-back-µs")
			b.ReportMetric(float64(behind.Load())/float64(b.N), "behind/op")
		})
	}
}

// raiseTo makes v at least x.
func raiseTo(v *atomic.Int64, x int64) {
	for {
		old := v.Load()
		if x <= old || v.CompareAndSwap(old, x) {
			return
		}
	}
}
