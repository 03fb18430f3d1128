package e2e

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/examples/internal/demo"
	"github.com/tollgate-go/tollgate/examples/internal/launch"
	"github.com/tollgate-go/tollgate/internal/testredis"
)

// A storeMode is a store the apps can run on, for the tests of plans with
// several policies.
type storeMode struct {
	name  string
	redis bool // run each app on a Redis server of its own
}

var storeModes = []storeMode{
	{name: "memory"},
	{name: "redis", redis: true},
}

// runPolicies runs test against every app on every store mode, all in
// parallel: on the memory store each app counts on its own, and on Redis
// each has a server of its own.
func runPolicies(t *testing.T, test func(t *testing.T, app *launch.App)) {
	for _, mode := range storeModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			for _, fw := range launch.Frameworks {
				t.Run(fw, func(t *testing.T) {
					t.Parallel()
					if !mode.redis {
						test(t, start(t, fw))
						return
					}
					// A server of each app's own: the apps share the
					// tenant's keys, and so could not run side by side on
					// one. It is killed, its keys with it, when the test ends.
					srv := testredis.Start(t)
					test(t, start(t, fw, "REDIS_URL=redis://"+srv.Addr()+"/0"))
				})
			}
		})
	}
}

// untilMidnight returns the whole seconds, rounded up, from now until the
// next UTC midnight, when a daily quota starts again.
func untilMidnight(now time.Time) int64 {
	now = now.UTC()
	y, m, d := now.Date()
	next := time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC)
	return int64(math.Ceil(next.Sub(now).Seconds()))
}

// TestTrialDailyQuota: umbrella is on the trial plan, a burst of 10 at 5
// requests a second and 30 a UTC day. It gets its burst at once, then 5 a
// second, and exactly 30 in all; then 429 with Retry-After at the next UTC
// midnight and a body naming the daily policy.
func TestTrialDailyQuota(t *testing.T) {
	if s := untilMidnight(time.Now()); s < 120 {
		t.Skipf("UTC midnight is %ds away: the quota's period would end during the test", s)
	}
	const tenant = "umbrella"
	runPolicies(t, func(t *testing.T, app *launch.App) {
		c := newClient()
		hello := app.URL + "/api/hello"
		began := time.Now()
		allowed := 0

		// The burst: as fast as the client goes, until the bucket
		// says no.
		for {
			r := do(t, c, http.MethodGet, hello, tenant)
			if r.status == http.StatusTooManyRequests {
				if p := r.json(t)["policy"]; p != "trial" {
					t.Fatalf("after %d requests: denied by %v, want the trial bucket (%s)", allowed, p, r.body)
				}
				if ra := r.int(t, "Retry-After"); ra != 1 {
					t.Errorf("the bucket's Retry-After = %d, want 1 (a token comes every 200 ms)", ra)
				}
				break
			}
			if r.status != http.StatusOK {
				t.Fatalf("status %d (%s)", r.status, r.body)
			}
			allowed++
			if allowed == 1 {
				want := `"trial";q=10;w=2, "trial-daily";q=30;w=86400`
				if got := r.header.Get("RateLimit-Policy"); got != want {
					t.Errorf("RateLimit-Policy = %q, want %q", got, want)
				}
			}
			if want := fmt.Sprintf(`"trial-daily";r=%d;`, 30-allowed); !strings.Contains(r.header.Get("RateLimit"), want) {
				t.Errorf("request %d: RateLimit = %q, want the daily quota at %s", allowed, r.header.Get("RateLimit"), want)
			}
			if allowed > 30 {
				t.Fatal("more than 30 requests allowed in a burst")
			}
		}
		if ceiling := 10 + int(5*time.Since(began).Seconds()) + 1; allowed < 10 || allowed > ceiling {
			t.Errorf("the burst let %d requests through, want 10 (and at most %d with what refilled)", allowed, ceiling)
		}

		// Then 5 a second: one request every 250 ms finds a token,
		// until the day's 30 are spent.
		var denied response
		for attempts := 0; attempts < 60 && denied.status == 0; attempts++ {
			time.Sleep(250 * time.Millisecond)
			r := do(t, c, http.MethodGet, hello, tenant)
			switch r.status {
			case http.StatusOK:
				allowed++
			case http.StatusTooManyRequests:
				if r.json(t)["policy"] == "trial-daily" {
					denied = r
				} else if allowed < 30 {
					t.Logf("request %d denied by %s at 4/s: a late tick", allowed+1, r.body)
				}
			default:
				t.Fatalf("status %d (%s)", r.status, r.body)
			}
		}
		elapsed := time.Since(began)
		if allowed != 30 {
			t.Fatalf("%d requests allowed before the daily quota denied, want exactly 30", allowed)
		}
		if ceiling := 10 + 5*elapsed.Seconds(); float64(allowed) > ceiling+1 {
			t.Errorf("%d allowed in %v: more than the burst and 5/s (%.0f)", allowed, elapsed, ceiling)
		}
		if denied.status == 0 {
			t.Fatal("no denial by the daily quota")
		}

		// The 429 points at the next UTC midnight.
		want := untilMidnight(time.Now())
		if ra := denied.int(t, "Retry-After"); ra < want-2 || ra > want+2 {
			t.Errorf("Retry-After = %d, want the %d s to the next UTC midnight", ra, want)
		}
		body := denied.json(t)
		if body["error"] != "rate_limited" || body["policy"] != "trial-daily" {
			t.Errorf("body %s, want rate_limited by trial-daily", denied.body)
		}
		if msg, _ := body["message"].(string); !strings.Contains(msg, "trial-daily") {
			t.Errorf("message %q does not name the daily policy", msg)
		}
		if got := denied.header.Get("RateLimit"); !strings.Contains(got, `"trial-daily";r=0;t=`) {
			t.Errorf("RateLimit = %q, want the daily quota at 0", got)
		}
		if got := denied.header.Get("X-RateLimit-Limit"); got != "30" {
			t.Errorf("X-RateLimit-Limit = %q on the daily denial, want the quota's 30", got)
		}

		// However long the client waits for the bucket, nothing
		// more today.
		time.Sleep(time.Second)
		for i := range 3 {
			if r := do(t, c, http.MethodGet, hello, tenant); r.status != http.StatusTooManyRequests {
				t.Errorf("request %d after the quota: status %d, want 429", 31+i, r.status)
			}
		}

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		line, err := app.WaitLog(ctx, func(m map[string]any) bool {
			return m["msg"] == "request throttled" && m["tenant_id"] == tenant && m["policy"] == "trial-daily"
		})
		if err != nil {
			t.Fatalf("no throttle log line naming the daily policy: %v", err)
		}
		if line["plan"] != "trial" || line["limit"] != float64(30) || line["rate"] != "daily" {
			t.Errorf("throttle log line %v: want plan trial, limit 30, rate daily", line)
		}
	})
}

// TestReportsBudget: initech is on the startup plan (a burst of 100), and
// every plan has a reports budget of 50 tokens an hour. Five reports of 10
// tokens pass; the sixth is denied by the budget, although the plan's own
// bucket still holds 50 tokens, and GET /api/hello still passes.
func TestReportsBudget(t *testing.T) {
	const tenant = "initech"
	runPolicies(t, func(t *testing.T, app *launch.App) {
		c := newClient()
		reports, hello := app.URL+"/api/reports", app.URL+"/api/hello"
		for i := 1; i <= 5; i++ {
			r := do(t, c, http.MethodPost, reports, tenant)
			if r.status/100 != 2 {
				t.Fatalf("report %d: status %d, want 2xx (%s)", i, r.status, r.body)
			}
			if i == 1 {
				want := `"startup";q=100;w=10, "startup-reports";q=50;w=3600`
				if got := r.header.Get("RateLimit-Policy"); got != want {
					t.Errorf("RateLimit-Policy = %q, want %q", got, want)
				}
			}
			if want := fmt.Sprintf(`"startup-reports";r=%d;`, 50-10*i); !strings.Contains(r.header.Get("RateLimit"), want) {
				t.Errorf("report %d: RateLimit = %q, want the budget at %s", i, r.header.Get("RateLimit"), want)
			}
		}
		r := do(t, c, http.MethodPost, reports, tenant)
		if r.status != http.StatusTooManyRequests {
			t.Fatalf("report 6: status %d, want 429 (%s)", r.status, r.body)
		}
		if body := r.json(t); body["policy"] != "startup-reports" {
			t.Errorf("report 6 denied by %v, want the reports budget startup-reports", body["policy"])
		}
		// 10 tokens at 50 an hour: 720 s.
		if ra := r.int(t, "Retry-After"); ra < 710 || ra > 720 {
			t.Errorf("Retry-After = %d, want about 720", ra)
		}
		if got := r.header.Get("X-RateLimit-Limit"); got != "50" {
			t.Errorf("X-RateLimit-Limit = %q, want the budget's 50", got)
		}

		h := do(t, c, http.MethodGet, hello, tenant)
		if h.status != http.StatusOK {
			t.Fatalf("GET /api/hello after the budget ran out: status %d (%s)", h.status, h.body)
		}
		// 100 - 5 x 10 - 1, give or take what refilled at 10/s;
		// the denied report took nothing.
		if rem := h.int(t, "X-RateLimit-Remaining"); rem < 49 || rem > 99 {
			t.Errorf("GET /api/hello: X-RateLimit-Remaining = %d, want 49 or a little more", rem)
		}
		if got := h.header.Get("RateLimit-Policy"); got != `"startup";q=100;w=10` {
			t.Errorf("GET /api/hello: RateLimit-Policy = %q, want the plan's bucket alone", got)
		}

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		line, err := app.WaitLog(ctx, func(m map[string]any) bool {
			return m["msg"] == "request throttled" && m["tenant_id"] == tenant
		})
		if err != nil {
			t.Fatalf("no throttle log line: %v", err)
		}
		for k, want := range map[string]any{
			"policy": "startup-reports", "budget": demo.ReportsBudget, "route": "/api/reports",
			"method": "POST", "cost": float64(demo.ReportCost), "limit": float64(50),
		} {
			if line[k] != want {
				t.Errorf("throttle log line: %s = %v, want %v (%v)", k, line[k], want, line)
			}
		}
	})
}
