package tally

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
)

func TestLatencyBounds(t *testing.T) {
	us := time.Microsecond
	ms := time.Millisecond
	want := []time.Duration{25 * us, 50 * us, 100 * us, 250 * us, 500 * us, ms, 2500 * us, 5 * ms, 10 * ms, 25 * ms, 50 * ms, 100 * ms}
	if got := LatencyBounds(50 * ms); !slices.Equal(got, want) {
		t.Errorf("LatencyBounds(50ms) = %v, want %v", got, want)
	}
	// A tiny timeout: bounds stay increasing.
	got := LatencyBounds(3 * time.Nanosecond)
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("LatencyBounds(3ns) = %v, not increasing", got)
		}
	}
}

func TestHistogram(t *testing.T) {
	h := NewHistogram([]time.Duration{time.Millisecond, 10 * time.Millisecond})
	for _, d := range []time.Duration{0, time.Millisecond, 2 * time.Millisecond, time.Second} {
		h.Observe(d)
	}
	s := h.Snapshot()
	if !slices.Equal(s.Bounds, []float64{0.001, 0.01}) || !slices.Equal(s.Cumulative, []uint64{2, 3}) || s.Count != 4 || s.Sum != 1.003 {
		t.Errorf("snapshot %+v", s)
	}
}

// Store latencies are counted in the series, beside the decisions.
func TestLatency(t *testing.T) {
	tl := New(10, 50*time.Millisecond, true)
	for _, o := range []tollgate.Observation{
		{Plan: "a", Outcome: tollgate.OutcomeAllowed, StoreLatency: 20 * time.Microsecond},
		{Plan: "a", Outcome: tollgate.OutcomeDenied, StoreLatency: 30 * time.Millisecond},
		{Plan: "b", Outcome: tollgate.OutcomeFailedOpen, StoreLatency: time.Second, ErrorKind: "timeout"},
		{Plan: "b", Outcome: tollgate.OutcomeFailedOpen, ErrorKind: "resolver"}, // no store call
		{Plan: "b", Outcome: tollgate.OutcomeRejected},                          // no store call
		{Plan: "b", Outcome: tollgate.OutcomeAllowed},                           // a clock that did not move
	} {
		tl.Observe(&o)
	}
	s := tl.Latency()
	if len(s.Bounds) != 12 || s.Bounds[0] != 25e-6 || s.Bounds[9] != 0.025 || s.Bounds[11] != 0.1 {
		t.Fatalf("bounds %v", s.Bounds)
	}
	if c := s.Cumulative; c[0] != 2 || c[9] != 2 || c[10] != 3 || c[11] != 3 || s.Count != 4 || s.Sum != 1.03002 {
		t.Errorf("latency %+v", s)
	}
	var decisions uint64
	tl.Decisions(func(_ Labels, _ tollgate.Outcome, n uint64) { decisions += n })
	if decisions != 6 {
		t.Errorf("%d decisions, want 6", decisions)
	}
}

func TestLabelValue(t *testing.T) {
	for in, want := range map[string]string{
		"GET /x":                       "GET /x",
		"a\xffb":                       "a\uFFFDb",
		strings.Repeat("é", 200):       strings.Repeat("é", 128), // 256 bytes
		"a" + strings.Repeat("é", 200): "a" + strings.Repeat("é", 127),
	} {
		if got := labelValue(in); got != want {
			t.Errorf("labelValue(%.20q...) = %.20q... (%d bytes), want %d bytes", in, got, len(got), len(want))
		}
	}
}

// Goroutines that meet new label sets at once each get the one series.
func TestConcurrentInserts(t *testing.T) {
	tl := New(1000, 0, false)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := range 500 {
				tl.Observe(&tollgate.Observation{Plan: "p", Route: fmt.Sprint("/", i%300), Outcome: tollgate.OutcomeAllowed, Cost: 2})
			}
		})
	}
	wg.Wait()
	var sets int
	var total uint64
	tl.Decisions(func(l Labels, o tollgate.Outcome, n uint64) {
		if o == tollgate.OutcomeAllowed {
			sets++
		}
		total += n
	})
	var tokens uint64
	tl.Tokens(func(_, _ string, n uint64) { tokens += n })
	if sets != 300 || tl.Sets() != 300 || total != 2000 || tokens != 4000 {
		t.Fatalf("%d sets (%d kept), %d decisions, %d tokens", sets, tl.Sets(), total, tokens)
	}
}
