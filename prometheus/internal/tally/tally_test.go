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
	cumulative, count, sum := h.Snapshot()
	if !slices.Equal(cumulative, []uint64{2, 3}) || count != 4 || sum != 1.003 {
		t.Errorf("snapshot %v %d %v", cumulative, count, sum)
	}
	if b := h.Bounds(); !slices.Equal(b, []float64{0.001, 0.01}) {
		t.Errorf("bounds %v", b)
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
