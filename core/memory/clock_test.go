package memory

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestMonoFollowsNanotime: the Store's clock is the runtime's, in
// microseconds since its origin, and never goes back.
func TestMonoFollowsNanotime(t *testing.T) {
	startMono.Do(mono.start)
	last := mono.micros()
	for i := range 100_000 {
		before := (nanotime() - mono.originNano) / 1000
		got := mono.micros()
		after := (nanotime() - mono.originNano) / 1000
		if got < before || got > after {
			t.Fatalf("read %d: %d µs outside [%d, %d]", i, got, before, after)
		}
		if got < last {
			t.Fatalf("read %d went back %d µs", i, last-got)
		}
		last = got
	}
}

// TestMonoInStepAcrossCPUs reads the clock from two goroutines at once,
// which the scheduler spreads over the CPUs, for 300 ms: a reading never
// falls behind one that another goroutine published before it, by more
// than the microsecond its rounding down to whole microseconds can cost.
// A clock out of step across CPUs, as the CPU's counter read out of order
// is on the Intel VM, fails it.
func TestMonoInStepAcrossCPUs(t *testing.T) {
	if testing.Short() {
		t.Skip("reads the clock for 300 ms")
	}
	startMono.Do(mono.start)
	var latest atomic.Int64
	var worst atomic.Int64
	deadline := nanotime() + int64(300*time.Millisecond)
	var wg sync.WaitGroup
	for range max(2, runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			for nanotime() < deadline {
				seen := latest.Load()
				got := mono.micros()
				raiseTo(&worst, seen-got)
				raiseTo(&latest, got)
			}
		})
	}
	wg.Wait()
	if w := worst.Load(); w > 1 {
		t.Fatalf("a reading fell %d µs behind one published before it", w)
	}
	t.Logf("GOMAXPROCS %d", runtime.GOMAXPROCS(0))
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
