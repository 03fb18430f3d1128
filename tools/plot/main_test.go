package main

import (
	"bytes"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCommittedFiguresAreCurrent fails when a picture in docs/img was not
// regenerated after a change to this program or to what it draws from.
func TestCommittedFiguresAreCurrent(t *testing.T) {
	for name, render := range figures {
		committed, err := os.ReadFile("../../docs/img/" + name)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := render(&b); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b.Bytes(), committed) {
			t.Errorf("docs/img/%s is out of date: run `go run ./tools/plot` from the repository root", name)
		}
	}
}

// TestPlansDocTablesAreCurrent fails when the header tables in
// docs/plans.md are not what the Limiter and HTTP layer send.
func TestPlansDocTablesAreCurrent(t *testing.T) {
	doc, err := os.ReadFile("../../docs/plans.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), headerTables()) {
		t.Error("docs/plans.md does not hold the current header tables: paste in the output of `go run ./tools/plot -tables`")
	}
}

// TestRateAndQuota checks what the policies picture and tables claim.
func TestRateAndQuota(t *testing.T) {
	allowed := 0
	for _, s := range trialSteps() {
		if s.denier == "" {
			allowed++
		}
		// Never more than the burst and 5 a second so far.
		if ceiling := 10 + 5*s.at.Seconds(); float64(allowed) > ceiling+1e-9 {
			t.Fatalf("at %v: %d allowed, more than the bucket's %v", s.at, allowed, ceiling)
		}
		if allowed == 30 && s.denier == "trial-daily" {
			want := strconv.FormatInt(int64(math.Ceil((24*time.Hour - s.at).Seconds())), 10)
			if got := s.header.Get("Retry-After"); got != want {
				t.Errorf("daily denial at %v: Retry-After %s, want %s (the next midnight)", s.at, got, want)
			}
		}
	}
	if allowed != 30 {
		t.Errorf("%d requests allowed in the day, want the quota's 30", allowed)
	}
	reports := reportSteps()
	if n := len(reports); reports[n-2].denier != "startup-reports" || reports[n-1].status != 200 {
		t.Errorf("the sixth report: %q; the GET after: %d; want denied by the budget, then 200", reports[n-2].denier, reports[n-1].status)
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
