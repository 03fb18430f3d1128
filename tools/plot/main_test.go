package main

import (
	"bytes"
	"os"
	"testing"
	"time"
)

// TestCommittedSVGIsCurrent fails when the picture in docs/img was not
// regenerated after a change to this program or to tollgate.GCRA.
func TestCommittedSVGIsCurrent(t *testing.T) {
	committed, err := os.ReadFile("../../docs/img/token-bucket-vs-fixed-window.svg")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := render(&b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), committed) {
		t.Fatal("docs/img/token-bucket-vs-fixed-window.svg is out of date: run `go run ./tools/plot` from the repository root")
	}
}

// TestDoubleBurst checks what the picture claims: the fixed window lets
// twice its quota through within a second of its boundary, while the token
// bucket never allows more than Burst + Rate x 1 s in any second.
func TestDoubleBurst(t *testing.T) {
	ts := requests()
	tb, fw := tokenBucket(ts), fixedWindow(ts)
	if got, _ := maxIn(fw.allowed, time.Second); got != 2*int(windowQuota) {
		t.Errorf("fixed window: at most %d in 1 s, want %d", got, 2*windowQuota)
	}
	ceiling := int(plan.Limit.Burst) + int(plan.Limit.Rate)
	if got, _ := maxIn(tb.allowed, time.Second); got > ceiling {
		t.Errorf("token bucket: %d in 1 s, more than Burst + Rate x 1 s = %d", got, ceiling)
	}
	// Same long-run rate: over the 30 s both allow the same within a few.
	if d := len(tb.allowed) - len(fw.allowed); d < -3 || d > 3 {
		t.Errorf("allowed %d (token bucket) and %d (fixed window): the long-run rates differ", len(tb.allowed), len(fw.allowed))
	}
}
