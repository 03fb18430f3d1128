package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/examples/internal/launch"
	"github.com/tollgate-go/tollgate/internal/testredis"
)

// workerSummary is what examples/worker prints as its last line with
// -json.
type workerSummary struct {
	Workers  int     `json:"workers"`
	Duration float64 `json:"duration_s"`
	Failures int64   `json:"failures"`
	Tenants  []struct {
		Tenant          string  `json:"tenant"`
		Plan            string  `json:"plan"`
		PlanRate        float64 `json:"plan_rate"`
		Burst           int64   `json:"burst"`
		Offered         float64 `json:"offered"`
		Jobs            int     `json:"jobs"`
		Rate            float64 `json:"rate"`
		RateBeyondBurst float64 `json:"rate_beyond_burst"`
		Delayed         int     `json:"delayed"`
		WaitMaxMs       float64 `json:"wait_max_ms"`
		PerWorker       []int   `json:"per_worker"`
	} `json:"tenants"`
}

// TestWorkerSharesBudgetsThroughRedis runs examples/worker as it is run by
// hand: 4 worker processes on one Redis for 30 seconds. initech, on the
// startup plan (10/s), has a backlog: past its burst, its jobs run at
// between 9.5 and 10 a second, taken by all 4 processes. The other
// tenants' jobs start without waiting: no Wait of theirs reserves a later
// turn.
func TestWorkerSharesBudgetsThroughRedis(t *testing.T) {
	t.Parallel() // 30 s mostly waiting: other tests run meanwhile
	addr := testredis.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := launch.Command(ctx, bins["worker"], "-n", "4", "-duration", "30s", "-json",
		"-redis", "redis://"+addr+"/0", "-prefix", testredis.Prefix(t))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("examples/worker: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	t.Logf("examples/worker:\n%s", stdout.String())
	lines := bytes.Split(bytes.TrimSpace(stdout.Bytes()), []byte("\n"))
	var s workerSummary
	if err := json.Unmarshal(lines[len(lines)-1], &s); err != nil {
		t.Fatalf("the last line is not the summary: %v", err)
	}
	if s.Workers != 4 || s.Duration != 30 || len(s.Tenants) != 4 {
		t.Fatalf("summary of %d workers over %vs and %d tenants, want 4, 30s and 4", s.Workers, s.Duration, len(s.Tenants))
	}
	for _, ts := range s.Tenants {
		if ts.Offered == 0 { // the backlog
			if ts.Tenant != "initech" || ts.Plan != "startup" || ts.PlanRate != 10 {
				t.Fatalf("the backlog is %s's on %s at %g/s, want initech's on startup at 10/s", ts.Tenant, ts.Plan, ts.PlanRate)
			}
			if ts.RateBeyondBurst < 9.5 || ts.RateBeyondBurst > 10 {
				t.Errorf("initech's jobs ran at %.3f a second beyond the burst, want between 9.5 and 10", ts.RateBeyondBurst)
			}
			for w, n := range ts.PerWorker {
				if n == 0 {
					t.Errorf("worker %d ran none of initech's jobs: the processes did not share its budget (%v)", w+1, ts.PerWorker)
				}
			}
			continue
		}
		if ts.Delayed != 0 {
			t.Errorf("%s (%s, %g jobs/s within %g/s): %d of %d jobs waited for a turn, want none", ts.Tenant, ts.Plan,
				ts.Offered, ts.PlanRate, ts.Delayed, ts.Jobs)
		}
		// Its jobs did run (a loaded machine may skip a tick now and
		// then).
		if sent := ts.Offered * s.Duration; float64(ts.Jobs) < sent/2 {
			t.Errorf("%s: %d jobs run of about %.0f sent", ts.Tenant, ts.Jobs, sent)
		}
	}
}
