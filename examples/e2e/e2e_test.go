package e2e

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-go/tollgate/core/redisstore"
	"github.com/tollgate-go/tollgate/examples/internal/launch"
	"github.com/tollgate-go/tollgate/internal/testredis"
)

// bins holds the example app binaries by framework, built once by TestMain.
var bins map[string]string

func TestMain(m *testing.M) {
	flag.Parse()
	// The parallel tests here spend their time waiting for tokens to come
	// back, not on the CPUs: run up to twelve at once (six apps on two
	// stores) unless -parallel says otherwise, rather than GOMAXPROCS.
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", "12"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	dir, err := os.MkdirTemp("", "tollgate-examples-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	bins, err = launch.Build(ctx, dir, append(slices.Clone(launch.Frameworks), "worker")...)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := testredis.Run(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// redisURL returns the URL of the Redis the tests share (a throwaway
// redis-server, or the one TOLLGATE_TEST_REDIS names) for a test that
// uses tenant, and deletes the tenant's bucket from it when the test ends,
// after the apps have stopped. Tenants are unique per run (unique), so runs
// and other tests sharing the database do not meet.
func redisURL(t *testing.T, tenant string) string {
	t.Helper()
	addr := testredis.Shared(t)
	t.Cleanup(func() {
		// The apps keep a tenant's bucket under the store's default prefix.
		if _, err := testredis.DeleteKeys(addr, redisstore.DefaultPrefix+"{"+tenant+"}"); err != nil {
			t.Error(err)
		}
	})
	return "redis://" + addr + "/0"
}

// rateLimitHeaders are every header a limited response may carry.
var rateLimitHeaders = []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit", "Retry-After"}

// start runs the app of fw with env and stops it, by its PID, when the test
// ends; a failed test logs the app's output.
func start(t *testing.T, fw string, env ...string) *launch.App {
	t.Helper()
	app, err := launch.Start(context.Background(), bins[fw], env...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		app.Stop()
		if t.Failed() {
			t.Logf("output of %s (pid %d):\n%s", fw, app.PID(), app.Output())
		}
	})
	return app
}

// unique returns a tenant name that no other test or run uses; it is not
// one of the demo's named tenants, so its plan is free.
func unique(name string) string {
	return fmt.Sprintf("e2e-%s-%d", name, time.Now().UnixNano())
}

type response struct {
	status  int
	header  http.Header
	body    []byte
	elapsed time.Duration
}

// do sends one request; tenant "" sends no X-Tenant-ID.
func do(t *testing.T, c *http.Client, method, url, tenant string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tenant != "" {
		req.Header.Set("X-Tenant-ID", tenant)
	}
	began := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, url, err)
	}
	return response{resp.StatusCode, resp.Header, body, time.Since(began)}
}

func newClient() *http.Client {
	// Generous: a loaded machine is slow, and no check here is about
	// timing except the Redis-down one, which measures itself.
	return &http.Client{Timeout: 15 * time.Second}
}

func (r response) int(t *testing.T, header string) int64 {
	t.Helper()
	v := r.header.Get(header)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s: %q is not an integer (headers %v)", header, v, r.header)
	}
	return n
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", r.body, err)
	}
	return m
}

func noRateLimitHeaders(t *testing.T, what string, r response) {
	t.Helper()
	for _, h := range rateLimitHeaders {
		if v := r.header.Values(h); len(v) > 0 {
			t.Errorf("%s: %s: %q, want none", what, h, v)
		}
	}
}

// TestContract checks each app, on the memory store, against the contract
// of DESIGN.md's "The example apps".
func TestContract(t *testing.T) {
	for _, fw := range launch.Frameworks {
		t.Run(fw, func(t *testing.T) {
			t.Parallel()
			app := start(t, fw)
			c := newClient()
			hello, reports := app.URL+"/api/hello", app.URL+"/api/reports"

			t.Run("healthz is not limited", func(t *testing.T) {
				// More requests than a free tenant's burst,
				// with and without a tenant.
				for i := range 50 {
					tenant := ""
					if i%2 == 0 {
						tenant = "healthz-prober"
					}
					r := do(t, c, http.MethodGet, app.URL+"/healthz", tenant)
					if r.status != http.StatusOK {
						t.Fatalf("request %d: status %d, want 200", i, r.status)
					}
					noRateLimitHeaders(t, "GET /healthz", r)
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
					{"hooli", "free", 20, 2},
				} {
					r := do(t, c, http.MethodGet, hello, tc.tenant)
					if r.status != http.StatusOK {
						t.Fatalf("%s: status %d, want 200 (%s)", tc.tenant, r.status, r.body)
					}
					if got := r.int(t, "X-RateLimit-Limit"); got != tc.burst {
						t.Errorf("%s: X-RateLimit-Limit = %d, want %d", tc.tenant, got, tc.burst)
					}
					// The bucket was full: one token gone, exactly.
					if got := r.int(t, "X-RateLimit-Remaining"); got != tc.burst-1 {
						t.Errorf("%s: X-RateLimit-Remaining = %d, want %d", tc.tenant, got, tc.burst-1)
					}
					policy := fmt.Sprintf(`"%s";q=%d;w=%d`, tc.plan, tc.burst, tc.burst/tc.rate)
					if got := r.header.Get("RateLimit-Policy"); got != policy {
						t.Errorf("%s: RateLimit-Policy = %q, want %q", tc.tenant, got, policy)
					}
					if got, want := r.header.Get("RateLimit"), fmt.Sprintf(`"%s";r=%d;t=`, tc.plan, tc.burst-1); !strings.HasPrefix(got, want) {
						t.Errorf("%s: RateLimit = %q, want %s<seconds>", tc.tenant, got, want)
					}
					if reset := r.int(t, "X-RateLimit-Reset"); reset < time.Now().Unix()-5 || reset > time.Now().Unix()+15 {
						t.Errorf("%s: X-RateLimit-Reset = %d, not within seconds of now (%d)", tc.tenant, reset, time.Now().Unix())
					}
					if r.header.Get("Retry-After") != "" {
						t.Errorf("%s: Retry-After on an allowed request", tc.tenant)
					}
					if msg := r.json(t)["message"]; msg != "hello, "+tc.tenant {
						t.Errorf("%s: message %q, want the tenant greeted", tc.tenant, msg)
					}
				}
			})

			t.Run("a request without a tenant gets 401", func(t *testing.T) {
				for _, method := range []string{http.MethodGet, http.MethodPost} {
					url := hello
					if method == http.MethodPost {
						url = reports
					}
					r := do(t, c, method, url, "")
					if r.status != http.StatusUnauthorized {
						t.Fatalf("%s: status %d, want 401 (%s)", method, r.status, r.body)
					}
					if code := r.json(t)["error"]; code != "missing_tenant" {
						t.Errorf("%s: error %q, want missing_tenant", method, code)
					}
					noRateLimitHeaders(t, method+" without a tenant", r)
				}
			})

			t.Run("a report costs 10 tokens", func(t *testing.T) {
				tenant := "report-writer"
				r := do(t, c, http.MethodPost, reports, tenant)
				if r.status/100 != 2 {
					t.Fatalf("status %d, want 2xx (%s)", r.status, r.body)
				}
				if got := r.int(t, "X-RateLimit-Remaining"); got != 10 {
					t.Errorf("a free tenant's first report: X-RateLimit-Remaining = %d, want 20 - 10", got)
				}
				began := time.Now()
				r = do(t, c, http.MethodPost, reports, tenant)
				if r.status/100 != 2 {
					t.Fatalf("second report: status %d, want 2xx (%s)", r.status, r.body)
				}
				// Whatever refilled meanwhile, at 2 tokens a second.
				refilled := int64(2*time.Since(began).Seconds()) + 1
				if got := r.int(t, "X-RateLimit-Remaining"); got < 0 || got > refilled {
					t.Errorf("second report: X-RateLimit-Remaining = %d, want 0 (+ at most %d refilled)", got, refilled)
				}
				r = do(t, c, http.MethodPost, reports, tenant)
				if r.status != http.StatusTooManyRequests {
					t.Fatalf("third report: status %d, want 429: fewer than 10 tokens are left", r.status)
				}
				// 10 tokens take 5 s to come back.
				if ra := r.int(t, "Retry-After"); ra < 1 || ra > 5 {
					t.Errorf("third report: Retry-After = %d, want 1 to 5", ra)
				}
			})

			t.Run("a flood gets 429 and a log line", func(t *testing.T) {
				tenant := "flooder"
				var denied response
				allowed := 0
				for range 200 {
					r := do(t, c, http.MethodGet, hello, tenant)
					if r.status == http.StatusTooManyRequests {
						denied = r
						break
					}
					if r.status != http.StatusOK {
						t.Fatalf("status %d, want 200 or 429 (%s)", r.status, r.body)
					}
					allowed++
				}
				if denied.status == 0 {
					t.Fatalf("200 requests of a free tenant, none denied")
				}
				if allowed < 20 {
					t.Errorf("denied after %d requests, before the burst of 20 was spent", allowed)
				}
				ra := denied.int(t, "Retry-After")
				if ra < 1 || ra > 10 {
					t.Errorf("Retry-After = %d, want whole seconds from 1 to 10", ra)
				}
				body := denied.json(t)
				if body["error"] != "rate_limited" {
					t.Errorf("error %q, want rate_limited", body["error"])
				}
				if body["retry_after"] != float64(ra) {
					t.Errorf("retry_after %v, want the Retry-After header's %d", body["retry_after"], ra)
				}
				if msg, _ := body["message"].(string); !strings.Contains(msg, strconv.FormatInt(ra, 10)+"s") {
					t.Errorf("message %q does not name the retry", msg)
				}
				if got := denied.int(t, "X-RateLimit-Remaining"); got != 0 {
					t.Errorf("X-RateLimit-Remaining = %d on a 429, want 0", got)
				}
				if got := denied.header.Get("RateLimit"); !strings.HasPrefix(got, `"free";r=0;t=`) {
					t.Errorf("RateLimit = %q on a 429", got)
				}

				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				line, err := app.WaitLog(ctx, func(m map[string]any) bool {
					return m["msg"] == "request throttled" && m["tenant_id"] == tenant
				})
				if err != nil {
					t.Fatalf("no throttle log line for %s: %v", tenant, err)
				}
				for k, want := range map[string]any{
					"level": "WARN", "plan": "free", "policy": "free", "route": "/api/hello", "method": "GET",
					"limit": float64(20), "rate": float64(2), "cost": float64(1),
				} {
					if line[k] != want {
						t.Errorf("throttle log line: %s = %v, want %v (%v)", k, line[k], want, line)
					}
				}
			})
		})
	}
}

// pingRedis fails the test if the Redis of url does not answer.
func pingRedis(t *testing.T, url string) {
	t.Helper()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("the shared Redis at %s does not answer: %v", url, err)
	}
}

// TestReplicasShareOneBudget runs two replicas of each app on one Redis and
// checks that a free tenant gets 20 requests in all, not 20 from each.
func TestReplicasShareOneBudget(t *testing.T) {
	// The apps' stores keep an epoch key beside the buckets (to notice a
	// Redis that lost its data); it goes when every app has stopped, once
	// the parallel subtests are done.
	addr := testredis.Shared(t)
	t.Cleanup(func() {
		if _, err := testredis.DeleteKeys(addr, redisstore.DefaultPrefix+"{#epoch}"); err != nil {
			t.Error(err)
		}
	})
	for _, fw := range launch.Frameworks {
		t.Run(fw, func(t *testing.T) {
			t.Parallel()
			tenant := unique(fw)
			url := redisURL(t, tenant)
			pingRedis(t, url)
			replicas := []*launch.App{start(t, fw, "REDIS_URL="+url), start(t, fw, "REDIS_URL="+url)}
			c := newClient()
			allowed := make([]int, len(replicas))
			failOpen := 0
			began := time.Now()
			for i := range 60 {
				r := do(t, c, http.MethodGet, replicas[i%2].URL+"/api/hello", tenant)
				if r.status == http.StatusOK && r.header.Get("X-RateLimit-Limit") == "" {
					// Redis missed the store's 50 ms timeout and
					// the request went through unlimited, as the
					// failure policy says: possible on a loaded
					// machine, and no evidence either way.
					failOpen++
					continue
				}
				switch r.status {
				case http.StatusOK:
					allowed[i%2]++
				case http.StatusTooManyRequests:
				default:
					t.Fatalf("replica %d: status %d (%s)", i%2, r.status, r.body)
				}
				if got := r.int(t, "X-RateLimit-Limit"); got != 20 {
					t.Fatalf("replica %d: X-RateLimit-Limit = %d, want 20", i%2, got)
				}
				if i == 1 && r.status == http.StatusOK && failOpen == 0 && time.Since(began) < 500*time.Millisecond {
					// The other replica took one token already.
					if got := r.int(t, "X-RateLimit-Remaining"); got != 18 {
						t.Errorf("second request, on the second replica: X-RateLimit-Remaining = %d, want 18", got)
					}
				}
			}
			if failOpen > 10 {
				t.Fatalf("%d of 60 answers were fail-open: Redis too slow to tell whether the replicas share a budget", failOpen)
			}
			total := allowed[0] + allowed[1]
			budget := 20 + int(2*time.Since(began).Seconds()) + 1
			t.Logf("allowed %d + %d = %d, budget %d, fail-open %d", allowed[0], allowed[1], total, budget, failOpen)
			if total < 20-failOpen || total > budget {
				t.Errorf("the two replicas allowed %d + %d = %d requests, want 20 to %d: one shared budget", allowed[0], allowed[1], total, budget)
			}
			if allowed[0] == 0 || allowed[1] == 0 {
				t.Errorf("allowed per replica %v: both should have served some", allowed)
			}
		})
	}
}

// While Redis is down, the store's timeout (50 ms) and circuit breaker keep
// it from stalling requests. Most answers must come within
// degradedLatency; on a loaded machine a few may be held up by the
// scheduler, but none may wait as long as a dial or a retry would
// (stalledLatency).
const (
	degradedLatency = 200 * time.Millisecond
	stalledLatency  = time.Second
)

// TestRedisDown points each app at a loopback port where nothing listens:
// it must start, and answer every request 200, quickly, without rate-limit
// figures (fail-open).
func TestRedisDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadRedis := "redis://" + ln.Addr().String() + "/0"
	ln.Close()
	// One app at a time, so the latencies measure the app, not a crowded
	// machine.
	for _, fw := range launch.Frameworks {
		t.Run(fw, func(t *testing.T) {
			app := start(t, fw, "REDIS_URL="+deadRedis)
			c := newClient()
			tenant := unique(fw)
			// More than the free plan's burst of 20: no limit applies.
			const n = 30
			var latencies []time.Duration
			for i := range n {
				r := do(t, c, http.MethodGet, app.URL+"/api/hello", tenant)
				if r.status != http.StatusOK {
					t.Fatalf("request %d: status %d, want 200 (%s)", i, r.status, r.body)
				}
				noRateLimitHeaders(t, "fail-open", r)
				latencies = append(latencies, r.elapsed)
				if r.elapsed > stalledLatency {
					t.Errorf("request %d took %v: Redis stalled it", i, r.elapsed)
				}
			}
			slices.Sort(latencies)
			p90 := latencies[n*9/10-1]
			t.Logf("latencies: median %v, 90th percentile %v, slowest %v", latencies[n/2], p90, latencies[n-1])
			if p90 > degradedLatency {
				t.Errorf("90%% of the answers took up to %v, want at most %v", p90, degradedLatency)
			}
			if !strings.Contains(app.Output(), "redis does not answer") {
				t.Errorf("no start-up warning about Redis")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := app.WaitLog(ctx, func(m map[string]any) bool { return m["msg"] == "rate limiter store failed" }); err != nil {
				t.Errorf("the store failure was not logged: %v", err)
			}
		})
	}
}
