// Package adaptertest is a conformance kit for tollgate's middleware: one
// HTTP-level behaviour table that the net/http middleware and every
// framework adapter must pass through a real HTTP server.
//
// An adapter's test calls Run with a function that starts a server for a
// Setup and returns its base URL. The server authenticates every request
// the way applications do: a middleware of its own reads the X-Tenant-ID
// header and stores the tenant in the framework's request context, and the
// limited routes take the tenant from there (the adapter's
// TenantFromContext). It serves these routes, each answering 200 with the
// body "ok" when the request is let through:
//
//	GET /limited       limited with Setup.Limiter, cost 1
//	GET /costly        limited, cost 5
//	GET /skipped       behind the same middleware as /limited, but exempted by its skip function
//	GET /custom        limited, cost 1, with the denial answer replaced: status 418
//	                   (I'm a teapot) and the JSON body {"denied":"<tenant>"}
//	GET /reports/{id}  limited, cost 1, drawing from the budget named Budget too; the
//	                   route is registered with the router's parameter syntax, and
//	                   the adapter's default names it by the router's pattern
//	GET /by-header     limited with every default of the adapter: the tenant is the
//	                   X-Tenant-ID header itself
//	GET /held          limited, cost 1, in the delay mode: a request that its tenant's
//	                   plan allows within HeldDelay is held and then served (the
//	                   adapter's MaxDelay of HeldDelay, MaxHeld left at its default)
//
// With Setup.Limiter nil, every route's middleware must log the mistake
// once, when it is built, and answer every request 500 with
// tollgatehttp.InternalErrorBody, never panic. Run swaps slog's default
// logger to see that, so it must not run in parallel with other tests of
// the package.
//
// RunClientIP checks an adapter's client-address tenants, over a server of
// its own.
package adaptertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/internal/testhooks"
	"github.com/tollgate-go/tollgate/core/storetest"
	"github.com/tollgate-go/tollgate/core/tollgatehttp"
)

// A Setup is what a server under test limits with.
type Setup struct {
	Limiter *tollgate.Limiter
}

// A NewServer starts a server for setup serving the routes of the package
// documentation, and returns its base URL, such as "http://127.0.0.1:41234".
// It must stop the server in t.Cleanup.
type NewServer func(t *testing.T, setup Setup) (baseURL string)

// Budget is the budget that GET /reports/{id} draws from.
const Budget = "reports"

// HeldDelay is the MaxDelay of GET /held.
const HeldDelay = 500 * time.Millisecond

// The plans of the kit. Tenants "t-small", "t-big", "t-tiny" and "t-free"
// are on the plan of their name; every other tenant is on small. Each gives
// the reports budget 2 tokens refilled at 1 a second. Free has the figures
// of tollgate's default free plan.
var (
	Small = tollgate.Plan{Name: "small", Limit: tollgate.Limit{Rate: 1, Burst: 3}, Policies: reports}
	Big   = tollgate.Plan{Name: "big", Limit: tollgate.Limit{Rate: 10, Burst: 10}, Policies: reports}
	Tiny  = tollgate.Plan{Name: "tiny", Limit: tollgate.Limit{Rate: 1, Burst: 2}, Policies: reports}
	Free  = tollgate.Plan{Name: "free", Limit: tollgate.Limit{Rate: 2, Burst: 20}, Policies: reports}

	reports = []tollgate.Policy{{Budget: Budget, Limit: tollgate.Limit{Rate: 1, Burst: 2}}}
)

// TenantKey is the context key under which an adapter test's net/http
// authentication stores the tenant, if it uses the request context.
type TenantKey struct{}

// Authenticate wraps h with the authentication of the kit for net/http
// servers: it moves the X-Tenant-ID header into the request with with.
func Authenticate(h http.Handler, with func(r *http.Request, tenant string) *http.Request) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tenant := r.Header.Get(tollgatehttp.DefaultTenantHeader); tenant != "" {
			r = with(r, tenant)
		}
		h.ServeHTTP(w, r)
	})
}

// SecretError is the text of the failing store's error: it must never reach
// a client.
const SecretError = "dial tcp 10.1.2.3:6379: secret internal detail"

type failingStore struct{}

func (failingStore) Take(context.Context, string, tollgate.Limit, int64) (tollgate.Result, error) {
	return tollgate.Result{}, errors.New(SecretError)
}

func (failingStore) Do(context.Context, *tollgate.Op) error { return errors.New(SecretError) }

// WithClock returns an option that makes a Limiter read the time of its
// decisions from now, for adapters' tests that build their own Limiters on
// a test clock.
func WithClock(now func() time.Time) tollgate.Option {
	return testhooks.LimiterClock(now).(tollgate.Option)
}

type kit struct {
	t       *testing.T
	base    string
	clock   *storetest.Clock
	client  *http.Client
	tenants *tollgate.StaticResolver
	events  *Events
}

// NewResolver returns the kit's plans and their tenants, as the package
// documentation lists them.
func NewResolver(t *testing.T) *tollgate.StaticResolver {
	t.Helper()
	resolver, err := tollgate.NewStaticResolver([]tollgate.Plan{Small, Big, Tiny, Free}, Small.Name,
		map[string]string{"t-small": "small", "t-big": "big", "t-tiny": "tiny", "t-free": "free"})
	if err != nil {
		t.Fatal(err)
	}
	return resolver
}

// newKit starts a server whose limiter uses the reference store on a
// manual clock, or the given store instead.
func newKit(t *testing.T, newServer NewServer, store tollgate.Store, opts ...tollgate.Option) *kit {
	t.Helper()
	clock := storetest.NewClock()
	if store == nil {
		store = storetest.NewModelStore(clock.Now)
	}
	return startKit(t, newServer, store, append([]tollgate.Option{WithClock(clock.Now)}, opts...), clock)
}

// newRealTimeKit starts a server whose limiter uses the reference store on
// the real clock, for the cases that wait.
func newRealTimeKit(t *testing.T, newServer NewServer) *kit {
	t.Helper()
	return startKit(t, newServer, storetest.NewModelStore(time.Now), nil, nil)
}

func startKit(t *testing.T, newServer NewServer, store tollgate.Store, opts []tollgate.Option, clock *storetest.Clock) *kit {
	t.Helper()
	resolver := NewResolver(t)
	events := &Events{}
	opts = append([]tollgate.Option{tollgate.WithLogger(nil), tollgate.WithOnThrottle(events.Record)}, opts...)
	l, err := tollgate.New(store, resolver, opts...)
	if err != nil {
		t.Fatal(err)
	}
	base := newServer(t, Setup{Limiter: l})
	client := &http.Client{Timeout: 10 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	return &kit{t: t, base: strings.TrimRight(base, "/"), clock: clock, client: client, tenants: resolver, events: events}
}

type response struct {
	status int
	header http.Header
	body   string
}

func (k *kit) get(path, tenant string) response {
	k.t.Helper()
	req, err := http.NewRequest(http.MethodGet, k.base+path, nil)
	if err != nil {
		k.t.Fatal(err)
	}
	if tenant != "" {
		req.Header.Set(tollgatehttp.DefaultTenantHeader, tenant)
	}
	return k.do(req)
}

func (k *kit) do(req *http.Request) response {
	k.t.Helper()
	resp, err := k.client.Do(req)
	if err != nil {
		k.t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		k.t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: string(body)}
}

var rateLimitHeaders = []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit"}

// wantFigures checks every rate-limit header of r against a single-policy
// plan, the expected remaining tokens, the seconds until the bucket is full
// (X-RateLimit-Reset) and the seconds until its next token (RateLimit's t).
func (k *kit) wantFigures(r response, plan tollgate.Plan, remaining, resetSecs, nextSecs int64) {
	k.t.Helper()
	window := int64(float64(plan.Limit.Burst) / plan.Limit.Rate)
	want := map[string]string{
		"X-RateLimit-Limit":     strconv.FormatInt(plan.Limit.Burst, 10),
		"X-RateLimit-Remaining": strconv.FormatInt(remaining, 10),
		"X-RateLimit-Reset":     strconv.FormatInt(k.clock.Now().Unix()+resetSecs, 10),
		"RateLimit-Policy":      fmt.Sprintf(`"%s";q=%d;w=%d`, plan.Name, plan.Limit.Burst, window),
		"RateLimit":             fmt.Sprintf(`"%s";r=%d;t=%d`, plan.Name, remaining, nextSecs),
	}
	for name, v := range want {
		if got := r.header.Values(name); len(got) != 1 || got[0] != v {
			k.t.Errorf("%s = %q, want exactly [%q]", name, got, v)
		}
	}
}

func (k *kit) wantNoFigures(r response) {
	k.t.Helper()
	for _, name := range append(rateLimitHeaders, "Retry-After") {
		if v := r.header.Get(name); v != "" {
			k.t.Errorf("%s = %q, want no such header", name, v)
		}
	}
}

func (k *kit) wantStatus(r response, status int) {
	k.t.Helper()
	if r.status != status {
		k.t.Fatalf("status %d, want %d (body %q)", r.status, status, r.body)
	}
}

// wantJSONError checks that r's body is a JSON object whose "error" is code.
func (k *kit) wantJSONError(r response, code string) map[string]any {
	k.t.Helper()
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		k.t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(r.body), &body); err != nil {
		k.t.Fatalf("body %q is not a JSON object: %v", r.body, err)
	}
	if body["error"] != code {
		k.t.Errorf("body error = %v, want %q (body %s)", body["error"], code, r.body)
	}
	if strings.Contains(r.body, "secret") || strings.Contains(r.body, "10.1.2.3") {
		k.t.Errorf("body leaks internal error text: %s", r.body)
	}
	return body
}

// Run runs the whole behaviour table against servers made by newServer.
func Run(t *testing.T, newServer NewServer) {
	t.Run("HeadersOnAllowed", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		for i := int64(1); i <= Small.Limit.Burst; i++ {
			r := k.get("/limited", "t-small")
			k.wantStatus(r, http.StatusOK)
			if r.body != "ok" {
				t.Fatalf("body %q, want the handler's %q", r.body, "ok")
			}
			k.wantFigures(r, Small, Small.Limit.Burst-i, i, 1) // a token a second
			if v := r.header.Get("Retry-After"); v != "" {
				t.Errorf("Retry-After = %q on an allowed request", v)
			}
		}
	})

	t.Run("BurstThen429", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		for i := int64(0); i < Small.Limit.Burst; i++ {
			k.wantStatus(k.get("/limited", "t-small"), http.StatusOK)
		}
		r := k.get("/limited", "t-small")
		k.wantStatus(r, http.StatusTooManyRequests)
		k.wantFigures(r, Small, 0, 3, 1)
		if got := r.header.Get("Retry-After"); got != "1" {
			t.Errorf("Retry-After = %q, want %q", got, "1")
		}
		body := k.wantJSONError(r, tollgatehttp.CodeRateLimited)
		if body["retry_after"] != float64(1) || body["policy"] != Small.Name {
			t.Errorf("body retry_after = %v, policy = %v; want 1 and %q", body["retry_after"], body["policy"], Small.Name)
		}
		// A token comes back after a second, on the store's clock.
		k.clock.Advance(999 * time.Millisecond)
		k.wantStatus(k.get("/limited", "t-small"), http.StatusTooManyRequests)
		k.clock.Advance(time.Millisecond)
		k.wantStatus(k.get("/limited", "t-small"), http.StatusOK)
	})

	t.Run("RetryAfterRoundsUp", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		for i := int64(0); i < Small.Limit.Burst; i++ {
			k.get("/limited", "t-small")
		}
		k.clock.Advance(100 * time.Millisecond) // 0.9s to go
		r := k.get("/limited", "t-small")
		k.wantStatus(r, http.StatusTooManyRequests)
		if got := r.header.Get("Retry-After"); got != "1" {
			t.Errorf("Retry-After = %q with 0.9s to wait, want %q", got, "1")
		}
	})

	t.Run("TenantsAreIsolated", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		for i := int64(0); i < Small.Limit.Burst; i++ {
			k.get("/limited", "tenant-a")
		}
		k.wantStatus(k.get("/limited", "tenant-a"), http.StatusTooManyRequests)
		r := k.get("/limited", "tenant-b")
		k.wantStatus(r, http.StatusOK)
		k.wantFigures(r, Small, Small.Limit.Burst-1, 1, 1)
	})

	t.Run("Plans", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		r := k.get("/limited", "t-big")
		k.wantStatus(r, http.StatusOK)
		k.wantFigures(r, Big, Big.Limit.Burst-1, 1, 1) // 100ms rounds up to 1s

		// A plan change applies from the next request on.
		if err := k.tenants.Assign("t-big", "small"); err != nil {
			t.Fatal(err)
		}
		r = k.get("/limited", "t-big")
		k.wantStatus(r, http.StatusOK)
		if got := r.header.Get("X-RateLimit-Limit"); got != "3" {
			t.Errorf("after the downgrade X-RateLimit-Limit = %q, want 3", got)
		}
	})

	t.Run("Cost", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		r := k.get("/costly", "t-big")
		k.wantStatus(r, http.StatusOK)
		k.wantFigures(r, Big, 5, 1, 1)
		r = k.get("/costly", "t-big")
		k.wantStatus(r, http.StatusOK)
		k.wantFigures(r, Big, 0, 1, 1)
		r = k.get("/costly", "t-big")
		k.wantStatus(r, http.StatusTooManyRequests)
		if got := r.header.Get("Retry-After"); got != "1" { // 5 tokens in 500ms
			t.Errorf("Retry-After = %q, want 1", got)
		}
	})

	t.Run("CostAboveBurstIsAnError", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		r := k.get("/costly", "t-tiny")
		k.wantStatus(r, http.StatusInternalServerError)
		k.wantJSONError(r, tollgatehttp.CodeInternalError)
		if v := r.header.Get("Retry-After"); v != "" {
			t.Errorf("Retry-After = %q on a request that can never succeed", v)
		}
	})

	t.Run("Skip", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		for i := 0; i < 10; i++ {
			r := k.get("/skipped", "t-small")
			k.wantStatus(r, http.StatusOK)
			k.wantNoFigures(r)
		}
		r := k.get("/limited", "t-small")
		k.wantFigures(r, Small, Small.Limit.Burst-1, 1, 1) // skipped requests took nothing
	})

	t.Run("MissingTenant", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		for _, path := range []string{"/limited", "/by-header"} {
			r := k.get(path, "")
			k.wantStatus(r, http.StatusUnauthorized)
			k.wantJSONError(r, tollgatehttp.CodeMissingTenant)
			k.wantNoFigures(r)
		}
	})

	t.Run("TenantTooLong", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		r := k.get("/limited", strings.Repeat("t", tollgate.MaxTenantLength+1))
		k.wantStatus(r, http.StatusBadRequest)
		k.wantJSONError(r, tollgatehttp.CodeInvalidTenant)
		k.wantNoFigures(r)
		r = k.get("/limited", strings.Repeat("t", tollgate.MaxTenantLength))
		k.wantStatus(r, http.StatusOK)
	})

	t.Run("TenantFromHeaderByDefault", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		r := k.get("/by-header", "t-big")
		k.wantStatus(r, http.StatusOK)
		k.wantFigures(r, Big, Big.Limit.Burst-1, 1, 1)
		// The same bucket as the authenticated routes': the tenant is one.
		r = k.get("/limited", "t-big")
		k.wantFigures(r, Big, Big.Limit.Burst-2, 1, 1)
	})

	t.Run("CustomDenial", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		for i := int64(0); i < Small.Limit.Burst; i++ {
			k.wantStatus(k.get("/custom", "t-small"), http.StatusOK)
		}
		r := k.get("/custom", "t-small")
		k.wantStatus(r, http.StatusTeapot)
		var body map[string]any
		if err := json.Unmarshal([]byte(r.body), &body); err != nil || body["denied"] != "t-small" {
			t.Errorf("custom body = %q, want {\"denied\":\"t-small\"}", r.body)
		}
		k.wantFigures(r, Small, 0, 3, 1)
		if got := r.header.Get("Retry-After"); got != "1" {
			t.Errorf("Retry-After = %q on the custom denial, want 1", got)
		}
	})

	t.Run("BudgetAndRouteName", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		r := k.get("/reports/42", "t-big")
		k.wantStatus(r, http.StatusOK)
		wantPolicy := `"big";q=10;w=1, "big-reports";q=2;w=2`
		if got := r.header.Get("RateLimit-Policy"); got != wantPolicy {
			t.Errorf("RateLimit-Policy = %q, want %q", got, wantPolicy)
		}
		if got, want := r.header.Get("RateLimit"), `"big";r=9;t=1, "big-reports";r=1;t=1`; got != want {
			t.Errorf("RateLimit = %q, want %q", got, want)
		}
		if got := r.header.Get("X-RateLimit-Limit"); got != "2" {
			t.Errorf("X-RateLimit-Limit = %q, want 2: the budget is closest to denying", got)
		}
		k.wantStatus(k.get("/reports/43", "t-big"), http.StatusOK)
		r = k.get("/reports/44", "t-big")
		k.wantStatus(r, http.StatusTooManyRequests)
		body := k.wantJSONError(r, tollgatehttp.CodeRateLimited)
		if body["policy"] != "big-reports" {
			t.Errorf("body policy = %v, want big-reports", body["policy"])
		}
		// The plan's own bucket spent 2 of 10 and nothing on the denial;
		// routes without the budget still pass.
		r = k.get("/limited", "t-big")
		k.wantStatus(r, http.StatusOK)
		k.wantFigures(r, Big, 7, 1, 1)
		e := k.events.Last(t)
		if e.Policy != "big-reports" || !strings.Contains(e.Route, "reports") || strings.Contains(e.Route, "44") {
			t.Errorf("event policy %q route %q: want big-reports and the router's pattern, not the path", e.Policy, e.Route)
		}
		if e.Tenant != "t-big" || e.Budget != Budget {
			t.Errorf("event tenant %q budget %q", e.Tenant, e.Budget)
		}
	})

	t.Run("FailOpen", func(t *testing.T) {
		k := newKit(t, newServer, failingStore{})
		r := k.get("/limited", "t-small")
		k.wantStatus(r, http.StatusOK)
		if r.body != "ok" {
			t.Errorf("body %q, want the handler's", r.body)
		}
		k.wantNoFigures(r)
	})

	t.Run("FailClosed", func(t *testing.T) {
		k := newKit(t, newServer, failingStore{}, tollgate.WithFailurePolicy(tollgate.FailClosed))
		r := k.get("/limited", "t-small")
		k.wantStatus(r, http.StatusServiceUnavailable)
		k.wantJSONError(r, tollgatehttp.CodeUnavailable)
		k.wantNoFigures(r)
	})

	t.Run("HostileTenants", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		for _, tenant := range []string{
			strings.Repeat("A", 200), "{x}", "%00", "\u00e9\u00e8", "t-small ", `"quoted"`, "a,b", "../../x",
		} {
			r := k.get("/limited", tenant)
			k.wantStatus(r, http.StatusOK)
			if got := r.header.Get("X-RateLimit-Remaining"); got != "2" {
				t.Errorf("tenant %.20q: X-RateLimit-Remaining = %q, want 2 (a bucket of its own)", tenant, got)
			}
		}
	})

	t.Run("NilLimiter", func(t *testing.T) {
		logs := CaptureDefaultLog(t)
		k := &kit{t: t, base: strings.TrimRight(newServer(t, Setup{}), "/"), client: &http.Client{Timeout: 10 * time.Second}}
		t.Cleanup(k.client.CloseIdleConnections)
		built := logs.Count(misconfiguredMsg)
		if built == 0 || !strings.Contains(logs.String(), tollgatehttp.ErrNoLimiter.Error()) {
			t.Errorf("building middleware without a Limiter logged no misconfiguration naming it:\n%s", logs)
		}
		for _, path := range []string{"/limited", "/skipped", "/costly", "/custom", "/reports/1", "/by-header", "/held"} {
			for range 2 {
				r := k.get(path, "t-small")
				k.wantStatus(r, http.StatusInternalServerError)
				k.wantJSONError(r, tollgatehttp.CodeInternalError)
				k.wantNoFigures(r)
				if strings.Contains(r.body, "nil") {
					t.Errorf("%s: body %q names the cause, which is for the log", path, r.body)
				}
			}
		}
		if n := logs.Count(misconfiguredMsg); n != built {
			t.Errorf("the misconfiguration was logged %d times at build and %d times by requests; want only at build", built, n-built)
		}
	})

	t.Run("DelayMode", func(t *testing.T) { runDelayMode(t, newServer) })

	t.Run("ConcurrentRequests", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		var mu sync.Mutex
		statuses := map[int]int{}
		var wg sync.WaitGroup
		for i := 0; i < 40; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequest(http.MethodGet, k.base+"/limited", nil)
				req.Header.Set(tollgatehttp.DefaultTenantHeader, "t-big")
				resp, err := k.client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				statuses[resp.StatusCode]++
				mu.Unlock()
			}()
		}
		wg.Wait()
		if statuses[http.StatusOK] != int(Big.Limit.Burst) || statuses[http.StatusTooManyRequests] != 40-int(Big.Limit.Burst) {
			t.Fatalf("statuses %v, want exactly %d x 200 and the rest 429 with the clock stopped", statuses, Big.Limit.Burst)
		}
	})
}
