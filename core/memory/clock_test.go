package memory

import (
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
		{"first, after 10 ms", 0, 0, 0, 30e6, 10e6, tscMeasured, 1.0 / 3},
		{"out of order", 100, 0, ghz3, 99, 5, tscKeep, 0},
		{"steady", 1e9, 5e8, ghz3, 1e9 + 3e9, 5e8 + 1e9, tscMeasured, 1.0 / 3},
		{"drift of 1e-4", 0, 0, ghz3, 3e9, 1e9 + 1e5, tscMeasured, (1e9 + 1e5) / 3e9},
		{"drift of 1e-2", 0, 0, ghz3, 3e9, 1.01e9, tscBroken, 0},
		{"a counter that stopped", 0, 0, 0, 1, 20e6, tscBroken, 0},
		{"a 1 MHz counter", 0, 0, 0, 20e3, 20e6, tscBroken, 0},
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

// TestMonoFollowsNanotime checks the clock on this machine, counter or
// not: after the first calibration it stays within 50 µs of the runtime's
// clock and never goes back by more than a microsecond.
func TestMonoFollowsNanotime(t *testing.T) {
	startMono.Do(mono.start)
	for range 3 {
		mono.micros()
		time.Sleep(tscFirstCalibration)
	}
	t.Logf("counter in use: %v", mono.anchor.Load() != nil)
	last := mono.micros()
	for i := range 100_000 {
		before := (nanotime() - mono.originNano) / 1000
		got := mono.micros()
		after := (nanotime() - mono.originNano) / 1000
		if got < before-50 || got > after+50 {
			t.Fatalf("read %d: %d µs outside [%d, %d] by more than 50 µs", i, got, before, after)
		}
		if got < last-1 {
			t.Fatalf("read %d went back %d µs", i, last-got)
		}
		last = max(last, got)
	}
}
