package tsc

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestRecalibrate(t *testing.T) {
	ghz3 := usPerTick(1.0 / 3)
	cases := []struct {
		name      string
		t0, n0    int64
		m         uint64
		t, n      int64
		verdict   int
		wantNsTck float64 // ns per tick, when measured
	}{
		{"too early for the first", 0, 0, 0, 3e6, 1e6, tscKeep, 0},
		{"too early for the first, at 10 ms", 0, 0, 0, 30e6, 10e6, tscKeep, 0},
		{"first, after 100 ms", 0, 0, 0, 300e6, 100e6, tscMeasured, 1.0 / 3},
		{"out of order", 100, 0, ghz3, 99, 5, tscKeep, 0},
		{"too early for a recalibration", 1e9, 5e8, ghz3, 1e9 + 3e4, 5e8 + 1e4, tscKeep, 0},
		{"steady", 1e9, 5e8, ghz3, 1e9 + 3e9, 5e8 + 1e9, tscMeasured, 1.0 / 3},
		{"drift of 1e-4", 0, 0, ghz3, 3e9, 1e9 + 1e5, tscMeasured, (1e9 + 1e5) / 3e9},
		{"drift of 1e-2, as NTP slews", 0, 0, ghz3, 3e9, 1.01e9, tscMeasured, 1.01e9 / 3e9},
		{"drift of 1e-1", 0, 0, ghz3, 3e9, 1.1e9, tscMeasured, 1.1e9 / 3e9},
		{"drift of 0.3", 0, 0, ghz3, 3e9, 1.3e9, tscBroken, 0},
		{"a counter that stopped", 0, 0, 0, 1, 200e6, tscBroken, 0},
		{"a 1 MHz counter", 0, 0, 0, 200e3, 200e6, tscBroken, 0},
		{"idle for a day", 0, 0, ghz3, 3 * 86400e9, 86400e9, tscMeasured, 1.0 / 3},
		{"idle for a year", 0, 0, ghz3, 3 * 365 * 86400e9, 365 * 86400e9, tscMeasured, 1.0 / 3},
	}
	for _, c := range cases {
		m, span, v := recalibrate(c.t0, c.n0, c.m, c.t, c.n)
		if v != c.verdict {
			t.Errorf("%s: verdict %d, want %d", c.name, v, c.verdict)
			continue
		}
		if v != tscMeasured {
			continue
		}
		nsPerTick := float64(m) / (1 << 64) * 1000
		if nsPerTick < c.wantNsTck*0.999999 || nsPerTick > c.wantNsTck*1.000001 {
			t.Errorf("%s: %v ns a tick, want %v", c.name, nsPerTick, c.wantNsTck)
		}
		if secs := float64(span) * nsPerTick / 1e9; secs < 0.999999 || secs > 1.000001 {
			t.Errorf("%s: span of %v s", c.name, secs)
		}
	}
}

func usPerTick(nsPerTick float64) uint64 {
	return uint64(nsPerTick / 1000 * (1 << 64))
}

// TestNextAnchor: a new rate starts where the old one reads, whichever
// side of the runtime's clock that is, and meets that clock a span later.
func TestNextAnchor(t *testing.T) {
	m := usPerTick(1.0 / 3) // 3 GHz
	const span = 3e9        // one second of ticks
	for _, ahead := range []int64{0, 1, -1, 2_500, -2_500, 400_000, -400_000, 5e6, -5e6, 50e6, -50e6} {
		prev := &tscAnchor{tsc: 1e12, us: 7_000_000, usFrac: 1 << 63, rate: m, usPerTick: m, span: span}
		at := int64(1e12 + span)
		reads, frac := prev.at(uint64(at - prev.tsc))
		readsNs := reads*1000 + int64(frac>>54)*1000>>10
		next := nextAnchor(prev, at-100, at, readsNs-ahead, m, span)
		if us, f := next.at(0); us != reads || f != frac {
			t.Errorf("ahead %d ns: the new anchor reads %d+%x, the old one %d+%x", ahead, us, f, reads, frac)
		}
		if next.rate != m || next.span != span {
			t.Errorf("ahead %d ns: rate %x span %d, want %x %d", ahead, next.rate, next.span, m, uint64(span))
		}
		// A span later the clock is the runtime's, within a microsecond, or
		// tscMaxSlew nearer to it when it was further off than that.
		later := next.read(span)
		want := (readsNs - ahead + int64(time.Second)) / 1000
		left := min(max(ahead, -tscMaxSlew), tscMaxSlew)
		if off := later - want - (ahead-left)/1000; off < -1 || off > 1 {
			t.Errorf("ahead %d ns: a span later the clock reads %d µs, want %d", ahead, later, want+(ahead-left)/1000)
		}
		// Past the span the slew is over: an hour later the clock is as
		// far from the runtime's as it was at the span's end.
		hour := next.read(3600 * span)
		if off := hour - (want + 3599e6) - (ahead-left)/1000; off < -1 || off > 1 {
			t.Errorf("ahead %d ns: an hour later the clock is %d µs off the runtime's", ahead, off)
		}
	}
}

// TestFirstAnchorNotBehind: when the counter takes over, it reads no less
// than the runtime's clock did at its pair.
func TestFirstAnchorNotBehind(t *testing.T) {
	m := usPerTick(1.0 / 3)
	for _, since := range []int64{10_000_000, 10_000_999, 12_345_678} {
		// 600 ticks at 3 GHz after the runtime's reading: 200 ns.
		a := nextAnchor(nil, 1000, 1600, since, m, 3e9)
		if got, want := a.read(0), (since+200)/1000; got != want {
			t.Errorf("since %d ns: the first anchor reads %d µs, want %d", since, got, want)
		}
	}
}

// TestMonoFollowsNanotime checks the clock on this machine, counter or
// not: through the first calibration and two recalibrations (about two
// seconds of reads) it stays within 50 µs of the runtime's clock and never
// goes back.
func TestMonoFollowsNanotime(t *testing.T) {
	if testing.Short() {
		t.Skip("reads the clock for two seconds")
	}
	mono.startOnce.Do(mono.start)
	last := mono.micros()
	anchors := map[*tscAnchor]bool{}
	deadline := nanotime() + int64(3*time.Second)
	for i := 0; len(anchors) < 3 && nanotime() < deadline; i++ {
		before := (nanotime() - mono.originNano) / 1000
		got := mono.micros()
		after := (nanotime() - mono.originNano) / 1000
		if got < before-50 || got > after+50 {
			t.Fatalf("read %d: %d µs outside [%d, %d] by more than 50 µs", i, got, before, after)
		}
		if got < last {
			t.Fatalf("read %d went back %d µs", i, last-got)
		}
		last = got
		if a := mono.anchor.Load(); a != nil {
			anchors[a] = true
		}
	}
	t.Logf("counter in use: %v; anchors seen: %d", mono.anchor.Load() != nil, len(anchors))
}

// TestMonoInStepAcrossCPUs reads the clock from two goroutines at once,
// which the scheduler spreads over the CPUs, for 300 ms: a reading never
// falls behind one that another goroutine published before it by more than
// maxLagMicros. The counter, read out of order with the load of the
// published reading, falls behind by a few microseconds at worst (13 µs in
// BenchmarkClockAcrossCPUs on the AMD VM); counters out of step across
// CPUs (27 to 55 µs, several times a second, under kvm-clock), or a clock
// that steps back at a recalibration, fail it.
func TestMonoInStepAcrossCPUs(t *testing.T) {
	if testing.Short() {
		t.Skip("reads the clock for 300 ms")
	}
	mono.startOnce.Do(mono.start)
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
	if w := worst.Load(); w > maxLagMicros {
		t.Fatalf("a reading fell %d µs behind one published before it", w)
	}
	t.Logf("counter in use: %v; GOMAXPROCS %d; worst lag %d µs", mono.anchor.Load() != nil, runtime.GOMAXPROCS(0), worst.Load())
}

// maxLagMicros bounds how far the Store's clock may read behind a reading
// another CPU published before: a decision on such a reading is one made
// that much earlier. 20 µs is 0.4 % of the shortest token interval of the
// default plans (5 ms, enterprise).
const maxLagMicros = 20

// TestTurnOffDoesNotStepBack: when the counter is turned off while its
// clock reads ahead of the runtime's, the runtime's is read that far ahead
// from then on; when it reads behind, the runtime's takes over as it is.
func TestTurnOffDoesNotStepBack(t *testing.T) {
	for _, ahead := range []int64{-700, 0, 700, 5_000} { // µs
		c := &tscClock{originNano: nanotime() - 1e9} // an origin a second ago
		t0, n0 := rdtsc(), nanotime()
		m := usPerTick(1.0 / 3)
		c.anchor.Store(&tscAnchor{tsc: t0, us: (n0-c.originNano)/1000 + ahead, rate: m, usPerTick: m, span: 3e9})
		c.state.Store(tscOn)
		before := c.anchor.Load().read(0)
		c.turnOff(t0, n0)
		got := c.micros()
		runtime := (nanotime() - c.originNano) / 1000
		if got < before {
			t.Errorf("ahead %d µs: read %d µs after turning off, %d before", ahead, got, before)
		}
		if want := runtime + max(ahead, 0); got < want-1 || got > want+1 {
			t.Errorf("ahead %d µs: read %d µs after turning off, want %d", ahead, got, want)
		}
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

// TestNanosMatchMicros: Nanos and Micros read one clock, in two units.
func TestNanosMatchMicros(t *testing.T) {
	for i := range 100_000 {
		before := Micros()
		ns := Nanos()
		after := Micros()
		if ns/1000 < before || ns/1000 > after {
			t.Fatalf("read %d: %d ns outside [%d, %d] µs", i, ns, before, after)
		}
	}
	if o := Origin(); o.IsZero() {
		t.Fatal("no origin")
	}
}

// read returns the clock's reading d ticks after the anchor, in whole
// microseconds.
func (a *tscAnchor) read(d uint64) int64 {
	us, _ := a.at(d)
	return min(us, maxMicros)
}
