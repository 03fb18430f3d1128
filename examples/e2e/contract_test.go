package e2e

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate-go/tollgate/core/redistest"
)

// TestContract checks each app, on the memory store, against the contract
// of DESIGN.md's "The example apps".
func TestContract(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, name string) {
		a := start(t, name, nil)
		hello, reports := a.url+"/api/hello", a.url+"/api/reports"

		t.Run("healthz and metrics are not limited", func(t *testing.T) {
			for i := range 30 {
				for _, path := range []string{"/healthz", "/metrics"} {
					r := do(t, http.MethodGet, a.url+path, "healthz-prober")
					if r.status != http.StatusOK {
						t.Fatalf("request %d to %s: status %d, want 200", i, path, r.status)
					}
					noRateLimitHeaders(t, path, r)
				}
			}
		})

		t.Run("each tenant gets its plan", func(t *testing.T) {
			for _, tc := range []struct {
				tenant, plan string
				burst, rate  int64
			}{
				{"acme", "enterprise", 2000, 200},
				{"globex", "growth", 500, 50},
				{"initech", "startup", 100, 10},
				{"umbrella", "trial", 10, 5},
				{"hooli", "free", 20, 2},
			} {
				r := do(t, http.MethodGet, hello, tc.tenant)
				if r.status != http.StatusOK {
					t.Fatalf("%s: status %d, want 200 (%s)", tc.tenant, r.status, r.body)
				}
				if got := r.int(t, "X-RateLimit-Limit"); got != tc.burst {
					t.Errorf("%s: X-RateLimit-Limit = %d, want %d", tc.tenant, got, tc.burst)
				}
				if got := r.int(t, "X-RateLimit-Remaining"); got != tc.burst-1 {
					t.Errorf("%s: X-RateLimit-Remaining = %d, want %d", tc.tenant, got, tc.burst-1)
				}
				policy := fmt.Sprintf(`"%s";q=%d;w=%d`, tc.plan, tc.burst, tc.burst/tc.rate)
				if got := r.header.Get("RateLimit-Policy"); !strings.HasPrefix(got, policy) {
					t.Errorf("%s: RateLimit-Policy = %q, want %q first", tc.tenant, got, policy)
				}
				if r.header.Get("Retry-After") != "" {
					t.Errorf("%s: Retry-After on an allowed request", tc.tenant)
				}
				if msg, _ := r.json(t)["message"].(string); !strings.Contains(msg, tc.tenant) {
					t.Errorf("%s: message %q, want the tenant greeted", tc.tenant, msg)
				}
			}
		})

		t.Run("a request without a tenant gets 401", func(t *testing.T) {
			for _, req := range [][2]string{{http.MethodGet, hello}, {http.MethodPost, reports}} {
				r := do(t, req[0], req[1], "")
				if r.status != http.StatusUnauthorized {
					t.Fatalf("%s: status %d, want 401 (%s)", req[0], r.status, r.body)
				}
				if code := r.json(t)["error"]; code != "missing_tenant" {
					t.Errorf("%s: error %q, want missing_tenant", req[0], code)
				}
				noRateLimitHeaders(t, req[0]+" without a tenant", r)
			}
		})

		t.Run("a report costs 10 tokens", func(t *testing.T) {
			tenant := unique("reports")
			for i, want := range []int64{10, 0} {
				began := time.Now()
				r := do(t, http.MethodPost, reports, tenant)
				if r.status != http.StatusAccepted {
					t.Fatalf("report %d: status %d, want 202 (%s)", i+1, r.status, r.body)
				}
				refilled := int64(2*time.Since(began).Seconds()) + 1 // at 2 tokens a second
				if got := r.int(t, "X-RateLimit-Remaining"); got < want || got > want+refilled {
					t.Errorf("report %d of a free tenant: X-RateLimit-Remaining = %d, want %d", i+1, got, want)
				}
			}
			r := do(t, http.MethodPost, reports, tenant)
			if r.status != http.StatusTooManyRequests {
				t.Fatalf("third report: status %d, want 429: fewer than 10 tokens are left", r.status)
			}
			if ra := r.int(t, "Retry-After"); ra < 1 || ra > 5 { // 10 tokens come back in 5 s
				t.Errorf("third report: Retry-After = %d, want 1 to 5", ra)
			}
		})

		t.Run("a flood gets 429 and a log line", func(t *testing.T) {
			tenant := unique("flood")
			var denied response
			allowed := 0
			for range 100 {
				if denied = do(t, http.MethodGet, hello, tenant); denied.status != http.StatusOK {
					break
				}
				allowed++
			}
			if denied.status != http.StatusTooManyRequests || allowed < 20 {
				t.Fatalf("status %d after %d allowed, want 429 after the burst of 20 (%s)", denied.status, allowed, denied.body)
			}
			ra := denied.int(t, "Retry-After")
			if ra < 1 || ra > 10 {
				t.Errorf("Retry-After = %d, want whole seconds from 1 to 10", ra)
			}
			if p := denied.deniedBy(t); p != "free" {
				t.Errorf("denied by %q, want the free plan's bucket", p)
			}
			if got := denied.header.Get("RateLimit"); !strings.HasPrefix(got, `"free";r=0;t=`) {
				t.Errorf("RateLimit = %q on a 429", got)
			}
			line, err := a.waitLog(withTimeout(t, 10*time.Second), func(m map[string]any) bool {
				return m["msg"] == "request throttled" && m["tenant_id"] == tenant
			})
			if err != nil {
				t.Fatalf("no throttle log line for %s: %v", tenant, err)
			}
			for k, want := range map[string]any{"level": "WARN", "plan": "free", "policy": "free", "limit": 20.0, "rate": 2.0, "cost": 1.0} {
				if line[k] != want {
					t.Errorf("throttle log line: %s = %v, want %v (%v)", k, line[k], want, line)
				}
			}
			if route, _ := line["route"].(string); !strings.Contains(route, "/api/hello") {
				t.Errorf("throttle log line: route %q, want /api/hello's pattern", route)
			}
		})

		t.Run("metrics count every decision, never a tenant", func(t *testing.T) {
			families := scrape(t, a)
			decisions := map[string]float64{}
			for _, m := range families["tollgate_decisions_total"].GetMetric() {
				decisions[label(m, "plan")+" "+label(m, "outcome")] += m.GetCounter().GetValue()
			}
			if decisions["enterprise allowed"] < 1 || decisions["free denied"] < 2 {
				t.Errorf("decisions %v: want acme's allowed and the free tenants' denials", decisions)
			}
			for name, f := range families {
				for _, m := range f.GetMetric() {
					for _, l := range m.GetLabel() {
						if strings.Contains(l.GetName(), "tenant") || strings.Contains(l.GetValue(), "e2e-") {
							t.Errorf("%s has the label %s=%q", name, l.GetName(), l.GetValue())
						}
					}
				}
			}
			if families["go_goroutines"] == nil {
				t.Error("no Go runtime metrics")
			}
		})

		if err := a.stop(); err != nil {
			t.Errorf("%s did not exit cleanly on SIGTERM: %v", name, err)
		}
	})
}

// scrape reads the app's /metrics with Prometheus's text parser.
func scrape(t *testing.T, a *app) map[string]*dto.MetricFamily {
	t.Helper()
	r := do(t, http.MethodGet, a.url+"/metrics", "")
	if r.status != http.StatusOK {
		t.Fatalf("GET /metrics: status %d (%s)", r.status, r.body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(r.body)))
	if err != nil {
		t.Fatalf("GET /metrics is not the Prometheus text format: %v", err)
	}
	return families
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// onEachStore runs test on every HTTP app, on the memory store and on a
// Redis server of the test's own, all in parallel.
func onEachStore(t *testing.T, test func(t *testing.T, a *app)) {
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			each(t, func(t *testing.T, name string) {
				var env []string
				if store == "redis" {
					env = []string{"REDIS_URL=redis://" + redistest.Start(t).Addr() + "/0"}
				}
				test(t, start(t, name, env))
			})
		})
	}
}

// untilMidnight returns the whole seconds, rounded up, until the next UTC
// midnight, when a daily quota starts again.
func untilMidnight(now time.Time) int64 {
	y, m, d := now.UTC().Date()
	return int64(math.Ceil(time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC).Sub(now).Seconds()))
}

// TestTrialDailyQuota: umbrella is on the trial plan, a burst of 10 at 5
// requests a second and 30 a UTC day: it gets exactly 30, then 429 until
// the next UTC midnight, naming the daily policy.
func TestTrialDailyQuota(t *testing.T) {
	t.Parallel()
	if s := untilMidnight(time.Now()); s < 60 {
		t.Skipf("UTC midnight is %ds away: the quota's period would end during the test", s)
	}
	onEachStore(t, func(t *testing.T, a *app) {
		began := time.Now()
		allowed, failedOpen := 0, 0
		var denied response
		for attempts := 0; attempts < 200 && denied.status == 0; attempts++ {
			r := do(t, http.MethodGet, a.url+"/api/hello", "umbrella")
			switch {
			case r.failedOpen():
				failedOpen++
			case r.status == http.StatusOK:
				if allowed++; allowed == 1 && !strings.Contains(r.header.Get("RateLimit-Policy"), `"trial-daily";q=30;w=86400`) {
					t.Errorf("RateLimit-Policy = %q, want the daily quota of 30", r.header.Get("RateLimit-Policy"))
				}
			case r.status == http.StatusTooManyRequests && r.deniedBy(t) == "trial-daily":
				denied = r
			case r.status == http.StatusTooManyRequests: // the bucket: wait for a token
				time.Sleep(200 * time.Millisecond)
			default:
				t.Fatalf("status %d (%s)", r.status, r.body)
			}
		}
		// A request that failed open may have been counted, late.
		if allowed > 30 || allowed+failedOpen < 30 {
			t.Fatalf("%d requests allowed (and %d failed open) before the daily quota denied, want exactly 30", allowed, failedOpen)
		}
		if ceiling := 10 + 5*time.Since(began).Seconds() + 1; float64(allowed) > ceiling {
			t.Errorf("%d allowed in %v: more than the burst and 5/s allow", allowed, time.Since(began))
		}
		if want, ra := untilMidnight(time.Now()), denied.int(t, "Retry-After"); ra < want-2 || ra > want+2 {
			t.Errorf("Retry-After = %d, want the %d s to the next UTC midnight", ra, want)
		}
		if got := denied.header.Get("RateLimit"); !strings.Contains(got, `"trial-daily";r=0;t=`) {
			t.Errorf("RateLimit = %q, want the daily quota at 0", got)
		}
		// The log has a line per tenant a second: the next one names
		// the daily policy, however long the client waits for the
		// bucket.
		var line map[string]any
		until(t, func() bool {
			if r := do(t, http.MethodGet, a.url+"/api/hello", "umbrella"); r.status != http.StatusTooManyRequests && !r.failedOpen() {
				t.Fatalf("after the day's 30: status %d, want 429", r.status)
			}
			lines := a.logs(func(m map[string]any) bool {
				return m["msg"] == "request throttled" && m["tenant_id"] == "umbrella" && m["policy"] == "trial-daily"
			})
			if len(lines) > 0 {
				line = lines[0]
			}
			time.Sleep(200 * time.Millisecond)
			return line != nil
		})
		if line["plan"] != "trial" || line["limit"] != 30.0 || line["rate"] != "daily" {
			t.Errorf("throttle log line %v: want plan trial, limit 30, rate daily", line)
		}
	})
}

// TestReportsBudget: every plan has a reports budget of 50 tokens an hour.
// initech (startup, a burst of 100) gets five reports of 10 tokens; the
// sixth is denied by the budget although its bucket holds 50 tokens, and
// GET /api/hello still passes.
func TestReportsBudget(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, a *app) {
		allowed, failedOpen := 0, 0
		var r response
		for allowed+failedOpen < 10 {
			r = do(t, http.MethodPost, a.url+"/api/reports", "initech")
			if r.status != http.StatusAccepted {
				break
			}
			if r.failedOpen() {
				failedOpen++
				continue
			}
			allowed++
			if want := fmt.Sprintf(`"startup-reports";r=%d;`, 50-10*allowed); failedOpen == 0 && !strings.Contains(r.header.Get("RateLimit"), want) {
				t.Errorf("report %d: RateLimit = %q, want the budget at %s", allowed, r.header.Get("RateLimit"), want)
			}
		}
		// A report that failed open may have been counted, late.
		if r.status != http.StatusTooManyRequests || r.deniedBy(t) != "startup-reports" || allowed > 5 || allowed+failedOpen < 5 {
			t.Fatalf("after %d reports (and %d failed open): status %d (%s), want 429 by startup-reports after 5", allowed, failedOpen, r.status, r.body)
		}
		if ra := r.int(t, "Retry-After"); ra < 710 || ra > 720 { // 10 tokens at 50 an hour
			t.Errorf("Retry-After = %d, want about 720", ra)
		}
		h := do(t, http.MethodGet, a.url+"/api/hello", "initech")
		for h.failedOpen() {
			h = do(t, http.MethodGet, a.url+"/api/hello", "initech")
		}
		if h.status != http.StatusOK {
			t.Fatalf("GET /api/hello after the budget ran out: status %d (%s)", h.status, h.body)
		}
		if rem := h.int(t, "X-RateLimit-Remaining"); rem < 49 || rem > 99 { // 100 - 50 - 1, and what refilled
			t.Errorf("GET /api/hello: X-RateLimit-Remaining = %d, want 49 or a little more", rem)
		}
		line, err := a.waitLog(withTimeout(t, 10*time.Second), func(m map[string]any) bool {
			return m["msg"] == "request throttled" && m["tenant_id"] == "initech"
		})
		if err != nil {
			t.Fatalf("no throttle log line: %v", err)
		}
		for k, want := range map[string]any{"policy": "startup-reports", "budget": "reports", "method": "POST", "cost": 10.0, "limit": 50.0} {
			if line[k] != want {
				t.Errorf("throttle log line: %s = %v, want %v (%v)", k, line[k], want, line)
			}
		}
	})
}

// TestShadowMode: with SHADOW=1 a flood that would get 429s gets 200s,
// without rate-limit headers, and the admin API counts the shadow denials.
func TestShadowMode(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, name string) {
		a := start(t, name, []string{"SHADOW=1", "ADMIN_TOKEN=" + adminToken})
		tenant := unique("shadow")
		if got := flood(t, a, tenant, 40); got[http.StatusOK] != 40 {
			t.Fatalf("in shadow mode the flood got %v, want 40 × 200", got)
		}
		noRateLimitHeaders(t, "shadow", do(t, http.MethodGet, a.url+"/api/hello", tenant))
		cand := candidate(t, a, tenant)
		if shadow, _ := cand["shadow_denied_requests"].(float64); shadow < 15 || cand["throttled_requests"] != shadow {
			t.Fatalf("%s: %v", tenant, cand)
		}
	})
}

// TestRedisFailsOpen: with Redis killed under it, each app answers every
// request without limits and without figures, quickly, and counts the
// decisions that failed open and the store's errors.
func TestRedisFailsOpen(t *testing.T) {
	each(t, func(t *testing.T, name string) {
		srv := redistest.Start(t)
		a := start(t, name, []string{"REDIS_URL=redis://" + srv.Addr() + "/0"})
		tenant := unique("failopen")
		limited := 0
		for range 5 {
			r := do(t, http.MethodGet, a.url+"/api/hello", tenant)
			if r.status != http.StatusOK {
				t.Fatalf("with Redis up: status %d", r.status)
			}
			if !r.failedOpen() {
				limited++
			}
		}
		if limited == 0 {
			t.Fatal("with Redis up, no request was limited")
		}
		srv.Kill()
		var slow []time.Duration
		for i := range 30 { // more than the free plan's burst
			r := do(t, http.MethodGet, a.url+"/api/hello", tenant)
			if r.status != http.StatusOK {
				t.Fatalf("request %d with Redis down: status %d, want 200 (%s)", i, r.status, r.body)
			}
			noRateLimitHeaders(t, "fail-open", r)
			// The first requests wait for the store's dials to fail,
			// until its circuit breaker opens; then none waits.
			if i >= 10 && r.elapsed > 250*time.Millisecond {
				slow = append(slow, r.elapsed)
			}
		}
		if len(slow) > 1 {
			t.Errorf("with Redis down and the breaker open, answers took %v", slow)
		}
		if _, err := a.waitLog(withTimeout(t, 10*time.Second), func(m map[string]any) bool { return m["msg"] == "rate limiter store failed" }); err != nil {
			t.Errorf("the store's failure was not logged: %v", err)
		}
		families := scrape(t, a)
		var failedOpen, storeErrors float64
		for _, m := range families["tollgate_decisions_total"].GetMetric() {
			if label(m, "outcome") == "failed_open" {
				failedOpen += m.GetCounter().GetValue()
			}
		}
		for _, m := range families["tollgate_store_errors_total"].GetMetric() {
			storeErrors += m.GetCounter().GetValue()
		}
		if want := float64(35 - limited); failedOpen != want || storeErrors < want {
			t.Errorf("%v decisions failed open and %v store errors counted, want %v and as many", failedOpen, storeErrors, want)
		}
	})
}

// TestRedisUnreachableAtStart: an app whose Redis does not answer starts
// and says so once, with the cause and the failure policy, and never that
// it is misconfigured.
func TestRedisUnreachableAtStart(t *testing.T) {
	t.Parallel()
	closed := redistest.Start(t)
	closed.Kill() // a loopback port where nothing listens
	each(t, func(t *testing.T, name string) {
		a := start(t, name, []string{"REDIS_URL=redis://" + closed.Addr() + "/0"})
		warnings := a.logs(func(m map[string]any) bool { return m["level"] == "WARN" || m["level"] == "ERROR" })
		if len(warnings) != 1 || warnings[0]["msg"] != "rate limiter store not reachable at start" {
			t.Fatalf("start-up warnings %v, want one: store not reachable", warnings)
		}
		w := warnings[0]
		if e, _ := w["error"].(string); !strings.Contains(e, "refused") {
			t.Errorf("the warning's error %q does not say the connection was refused", e)
		}
		if p, _ := w["policy"].(string); !strings.Contains(p, "fail-open") {
			t.Errorf("the warning's policy %q does not say fail-open", p)
		}
		if r := do(t, http.MethodGet, a.url+"/api/hello", unique("unreachable")); r.status != http.StatusOK {
			t.Errorf("status %d, want 200 (fail-open)", r.status)
		}
	})
}

// TestRedisMisconfigured: an app whose Redis refuses its password, or has
// no database 99, exits with status 1 and the cause, before it listens and
// without claiming to serve without limits.
func TestRedisMisconfigured(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	if err := c.ConfigSet(t.Context(), "requirepass", "right").Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, url, want string }{
		{"wrong password", "redis://:wrong@" + srv.Addr() + "/0", "WRONGPASS"},
		{"no such database", "redis://:right@" + srv.Addr() + "/99", "DB index is out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, name := range apps {
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					a := launch(t, name, []string{"REDIS_URL=" + tc.url})
					var exit *exec.ExitError
					if err := a.wait(withTimeout(t, 20*time.Second)); !errors.As(err, &exit) || exit.ExitCode() != 1 {
						t.Fatalf("exited with %v, want status 1\n%s", err, a.out)
					}
					out := a.out.String()
					if !strings.Contains(out, tc.want) || !strings.Contains(out, `"msg":"exiting"`) {
						t.Errorf("the output does not give the cause (%s):\n%s", tc.want, out)
					}
					if strings.Contains(out, `"listening"`) || strings.Contains(out, "without") || strings.Contains(out, "not reachable") {
						t.Errorf("the output claims to serve:\n%s", out)
					}
				})
			}
		})
	}
}
