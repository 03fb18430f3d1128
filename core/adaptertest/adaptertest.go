// Package adaptertest is a conformance kit for tollgate's middleware: one
// HTTP-level behaviour table that the net/http middleware and every
// framework adapter must pass through a real HTTP server.
//
// An adapter's test calls Run with a function that starts a server for a
// Setup and returns its base URL. The server authenticates every request
// the way applications do: a middleware of its own finds the tenant with
// Tenant (the X-Tenant-ID header, or X-Tenant-ID-Escaped for tenants that a
// header value can not carry) and stores it in the framework's request
// context, and the limited routes take the tenant from there (the
// adapter's TenantFromContext). It serves these routes, each answering 200
// with the body "ok" when the request is let through:
//
//	GET /limited       limited with Setup.Limiter, cost 1
//	GET /costly        limited, cost 5
//	GET /skipped       behind the same middleware as /limited, but exempted by its skip function
//	GET /custom        limited, cost 1, with the denial answer replaced: status 418
//	                   (I'm a teapot) and the JSON body {"denied":"<tenant>"}
//	GET /public        limited, cost 1, with the answer to a request without a tenant
//	                   replaced by one that lets it through, unlimited
//	GET /reports/{id}  limited, cost 1, drawing from the budget named Setup.Budget too;
//	                   the route is registered with the router's parameter syntax, and
//	                   the adapter's default names it by the router's pattern
//	GET /by-header     limited with every default of the adapter: the tenant is the
//	                   X-Tenant-ID header itself
//	GET /held          limited, cost 1, in the delay mode: a request that its tenant's
//	                   plan allows within HeldDelay is held and then served (the
//	                   adapter's MaxDelay of HeldDelay, MaxHeld left at its default)
//	GET /slow          limited, cost 1; the handler calls Setup.Slow with the request's
//	                   context and the value of the SlowHeader header, then answers
//	                   200 "ok". Tenant "t-slots" is on the plan Slots, which allows
//	                   SlotsInFlight requests in flight.
//	GET /slow-held     as /slow, in the delay mode with a MaxDelay of SlotDelay: a
//	                   request refused for want of a slot waits for one
//
// A panic in Setup.Slow (it panics with http.ErrAbortHandler, which net/http
// does not log) must reach the framework's own recovery, or net/http's; a
// framework that recovers from none (Fiber) must be given its recover
// middleware, outside the limiter.
//
// With Setup.Limiter nil, or a Setup.Budget that no plan has, the middleware
// concerned must log the mistake once, when it is built, and answer every
// request 500 with the body of adapterkit.InternalErrorBody, never panic.
// Run swaps slog's default logger to see that, so it must not run in
// parallel with other tests of the package.
//
// Every 429 the kit receives must be an RFC 9457 problem details body of
// the type quota-exceeded (Content-Type application/problem+json) naming
// its violated policies; every other answer of the middleware a problem
// details body too. With RunWith, every rate-limit header value of every
// response is also parsed as an RFC 9651 structured field by the parsers
// an adapter's test gives, written by others than tollgate.
//
// RunClientIP checks an adapter's client-address tenants, over a server of
// its own, and CheckAllocs what an adapter allocates.
package adaptertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adapterkit"
	"github.com/tollgate-go/tollgate/core/internal/hooks"
	"github.com/tollgate-go/tollgate/core/storekit"
	"github.com/tollgate-go/tollgate/core/storetest"
)

// A Setup is what a server under test limits with.
type Setup struct {
	Limiter *tollgate.Limiter

	// Budget is the budget GET /reports/{id} draws from: the kit's
	// Budget, but for the case that checks a name no plan has.
	Budget string

	// Slow is the work of GET /slow and GET /slow-held: their handlers
	// call it with the request's context and the value of the
	// SlowHeader header before they answer. It may block, and panic.
	Slow func(ctx context.Context, how string)
}

// SlowHeader is the request header whose value the handlers of GET /slow
// and GET /slow-held hand to Setup.Slow.
const SlowHeader = "X-Slow"

// A NewServer starts a server for setup serving the routes of the package
// documentation, and returns its base URL, such as "http://127.0.0.1:41234".
// It must stop the server in t.Cleanup.
type NewServer func(t *testing.T, setup Setup) (baseURL string)

// Budget is the budget that GET /reports/{id} draws from.
const Budget = "reports"

// HeldDelay is the MaxDelay of GET /held.
const HeldDelay = 500 * time.Millisecond

// SlotDelay is the MaxDelay of GET /slow-held.
const SlotDelay = time.Second

// SlotsInFlight is how many requests of a tenant on the plan Slots may be
// in flight at once.
const SlotsInFlight = 3

// The plans of the kit. Tenants "t-small", "t-big", "t-tiny", "t-free" and
// "t-slots" are on the plan of their name; every other tenant is on small.
// Each but Slots gives the reports budget 2 tokens refilled at 1 a second.
// Free has the figures of tollgate's default free plan. Slots has tokens
// to spare and caps the requests in flight at SlotsInFlight, with a policy
// named "slots-inflight".
var (
	Small = tollgate.Plan{Name: "small", Limit: tollgate.Limit{Rate: 1, Burst: 3}, Policies: reports}
	Big   = tollgate.Plan{Name: "big", Limit: tollgate.Limit{Rate: 10, Burst: 10}, Policies: reports}
	Tiny  = tollgate.Plan{Name: "tiny", Limit: tollgate.Limit{Rate: 1, Burst: 2}, Policies: reports}
	Free  = tollgate.Plan{Name: "free", Limit: tollgate.Limit{Rate: 2, Burst: 20}, Policies: reports}
	Slots = tollgate.Plan{Name: "slots", Limit: tollgate.Limit{Rate: 100_000, Burst: 100_000},
		Policies: []tollgate.Policy{{InFlight: SlotsInFlight}}}

	reports = []tollgate.Policy{{Budget: Budget, Limit: tollgate.Limit{Rate: 1, Burst: 2}}}
)

// maxTenantLength is the longest tenant ID the engine accepts, in bytes.
const maxTenantLength = 256

// TenantKey is the context key under which an adapter test's
// authentication stores the tenant, if its framework keys values by any
// value.
type TenantKey struct{}

// EscapedTenantHeader carries, URL-escaped (url.PathEscape), a tenant that
// a header value can not: one with a NUL byte or a line break, which HTTP
// clients refuse to send.
const EscapedTenantHeader = "X-Tenant-ID-Escaped"

// Tenant returns the tenant the kit's authentication finds, given the
// values of the X-Tenant-ID and X-Tenant-ID-Escaped headers: the escaped
// one, unescaped, if it is set.
func Tenant(header, escaped string) string {
	if escaped == "" {
		return header
	}
	tenant, err := url.PathUnescape(escaped)
	if err != nil {
		return ""
	}
	return tenant
}

// Authenticate wraps h with the authentication of the kit for net/http
// servers: it moves the tenant (see Tenant) into the request with with.
func Authenticate(h http.Handler, with func(r *http.Request, tenant string) *http.Request) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tenant := Tenant(r.Header.Get(adapterkit.TenantHeader), r.Header.Get(EscapedTenantHeader)); tenant != "" {
			r = with(r, tenant)
		}
		h.ServeHTTP(w, r)
	})
}

// SlowHandler returns the net/http handler of GET /slow and GET
// /slow-held for setup: it calls setup.Slow with the request's context and
// the value of the SlowHeader header, then answers 200 "ok".
func SlowHandler(setup Setup) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		setup.Slow(r.Context(), r.Header.Get(SlowHeader))
		_, _ = io.WriteString(w, "ok")
	})
}

// SecretError is the text of the failing store's error: it must never reach
// a client.
const SecretError = "dial tcp 10.1.2.3:6379: secret internal detail"

// FailingStore is a tollgate.Store that fails every operation with
// SecretError.
type FailingStore struct{}

// Do fails.
func (FailingStore) Do(context.Context, *storekit.Op) error { return errors.New(SecretError) }

// WithClock returns an option that makes a Limiter read the time of its
// decisions from now, for adapters' tests that build their own Limiters on
// a test clock.
func WithClock(now func() time.Time) tollgate.Option {
	return hooks.LimiterClock(now).(tollgate.Option)
}

type kit struct {
	t       *testing.T
	base    string
	clock   *storetest.Clock
	client  *http.Client
	tenants *tollgate.StaticResolver
	events  *Events
	limiter *tollgate.Limiter
	slow    *SlowWork
	fields  *FieldParsers // nil: the header values are not parsed
}

// NewResolver returns the kit's plans and their tenants, as the package
// documentation lists them.
func NewResolver(t *testing.T) *tollgate.StaticResolver {
	t.Helper()
	resolver, err := tollgate.NewStaticResolver([]tollgate.Plan{Small, Big, Tiny, Free, Slots}, Small.Name,
		map[string]string{"t-small": "small", "t-big": "big", "t-tiny": "tiny", "t-free": "free", "t-slots": "slots"})
	if err != nil {
		t.Fatal(err)
	}
	return resolver
}

// newKit starts a server whose limiter uses the reference store on a
// manual clock, or the given store instead.
func newKit(t *testing.T, newServer serverOf, store tollgate.Store, opts ...tollgate.Option) *kit {
	t.Helper()
	clock := storetest.NewClock()
	if store == nil {
		store = storetest.NewModelStore(clock.Now)
	}
	return startKit(t, newServer, store, append([]tollgate.Option{WithClock(clock.Now)}, opts...), clock, Budget)
}

// newRealTimeKit starts a server whose limiter uses the reference store on
// the real clock, for the cases that wait.
func newRealTimeKit(t *testing.T, newServer serverOf, opts ...tollgate.Option) *kit {
	t.Helper()
	return startKit(t, newServer, storetest.NewModelStore(time.Now), opts, nil, Budget)
}

func startKit(t *testing.T, newServer serverOf, store tollgate.Store, opts []tollgate.Option, clock *storetest.Clock, budget string) *kit {
	t.Helper()
	resolver := NewResolver(t)
	events := &Events{}
	opts = append([]tollgate.Option{tollgate.WithLogger(nil), tollgate.WithObserver(events)}, opts...)
	l, err := tollgate.New(store, resolver, opts...)
	if err != nil {
		t.Fatal(err)
	}
	slow := NewSlowWork()
	k := connect(t, newServer.start(t, Setup{Limiter: l, Budget: budget, Slow: slow.Do}), clock, resolver, events, newServer.fields)
	k.limiter, k.slow = l, slow
	return k
}

func connect(t *testing.T, base string, clock *storetest.Clock, resolver *tollgate.StaticResolver, events *Events, fields *FieldParsers) *kit {
	client := &http.Client{Timeout: 10 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	return &kit{t: t, base: strings.TrimRight(base, "/"), clock: clock, client: client, tenants: resolver, events: events, fields: fields}
}

// routeLogged finds the route in a line of slog's text handler.
var routeLogged = regexp.MustCompile(`request throttled.* route=("(?:[^"\\]|\\.)*"|\S*)`)

// serverOf is what a case needs of the adapter under test: how to start
// its server, and the parsers of header values its test gave.
type serverOf struct {
	start  NewServer
	fields *FieldParsers
}

type response struct {
	status int
	header http.Header
	body   string
}

// get sends GET path as tenant, in X-Tenant-ID if a header value can carry
// it, else in X-Tenant-ID-Escaped.
func (k *kit) get(path, tenant string) response {
	k.t.Helper()
	req, err := http.NewRequest(http.MethodGet, k.base+path, nil)
	if err != nil {
		k.t.Fatal(err)
	}
	switch {
	case tenant == "":
	case headerSafe(tenant):
		req.Header.Set(adapterkit.TenantHeader, tenant)
	default:
		req.Header.Set(EscapedTenantHeader, url.PathEscape(tenant))
	}
	return k.do(req)
}

// headerSafe reports whether s can travel as a header value as it is.
func headerSafe(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return false
		}
	}
	return strings.TrimSpace(s) == s
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
	r := response{status: resp.StatusCode, header: resp.Header, body: string(body)}
	k.check(r)
	return r
}

// check makes the checks that hold for every response: a 429 is problem
// details, and every rate-limit header value parses.
func (k *kit) check(r response) {
	k.t.Helper()
	if r.status == http.StatusTooManyRequests {
		k.wantProblem(r, http.StatusTooManyRequests)
	}
	if k.fields != nil {
		k.fields.check(k.t, r.header)
	}
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

// wantOK checks that r is the handler's answer.
func (k *kit) wantOK(r response) {
	k.t.Helper()
	k.wantStatus(r, http.StatusOK)
	if r.body != "ok" {
		k.t.Fatalf("body %q, want the handler's %q", r.body, "ok")
	}
}

// wantJSONError checks that r's body is problem details (see
// wantProblem) whose extension member "error" is code.
func (k *kit) wantJSONError(r response, code string) map[string]any {
	k.t.Helper()
	body := k.wantProblem(r, r.status)
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
	run(t, serverOf{start: newServer})
}

// RunWith is Run with every rate-limit header value of every response also
// parsed by parsers.
func RunWith(t *testing.T, newServer NewServer, parsers FieldParsers) {
	run(t, serverOf{start: newServer, fields: &parsers})
}

func run(t *testing.T, newServer serverOf) {
	t.Run("HeadersOnAllowed", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		for i := int64(1); i <= Small.Limit.Burst; i++ {
			r := k.get("/limited", "t-small")
			k.wantOK(r)
			k.wantFigures(r, Small, Small.Limit.Burst-i, i, 1) // a token a second
			if v := r.header.Get("Retry-After"); v != "" {
				t.Errorf("Retry-After = %q on an allowed request", v)
			}
		}
	})

	t.Run("BurstThen429", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		for i := int64(0); i < Small.Limit.Burst; i++ {
			k.wantOK(k.get("/limited", "t-small"))
		}
		r := k.get("/limited", "t-small")
		k.wantStatus(r, http.StatusTooManyRequests)
		k.wantFigures(r, Small, 0, 3, 1)
		if got := r.header.Get("Retry-After"); got != "1" {
			t.Errorf("Retry-After = %q, want %q", got, "1")
		}
		body := k.wantJSONError(r, adapterkit.CodeRateLimited)
		if body["retry_after"] != float64(1) || body["policy"] != Small.Name {
			t.Errorf("body retry_after = %v, policy = %v; want 1 and %q", body["retry_after"], body["policy"], Small.Name)
		}
		// A token comes back after a second, on the store's clock.
		k.clock.Advance(999 * time.Millisecond)
		k.wantStatus(k.get("/limited", "t-small"), http.StatusTooManyRequests)
		k.clock.Advance(time.Millisecond)
		k.wantOK(k.get("/limited", "t-small"))
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
		k.wantOK(r)
		k.wantFigures(r, Small, Small.Limit.Burst-1, 1, 1)
	})

	t.Run("Plans", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		r := k.get("/limited", "t-big")
		k.wantOK(r)
		k.wantFigures(r, Big, Big.Limit.Burst-1, 1, 1) // 100ms rounds up to 1s

		// A plan change applies from the next request on.
		if err := k.tenants.Assign("t-big", "small"); err != nil {
			t.Fatal(err)
		}
		r = k.get("/limited", "t-big")
		k.wantOK(r)
		if got := r.header.Get("X-RateLimit-Limit"); got != "3" {
			t.Errorf("after the downgrade X-RateLimit-Limit = %q, want 3", got)
		}
	})

	t.Run("Cost", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		r := k.get("/costly", "t-big")
		k.wantOK(r)
		k.wantFigures(r, Big, 5, 1, 1)
		r = k.get("/costly", "t-big")
		k.wantOK(r)
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
		k.wantJSONError(r, adapterkit.CodeInternalError)
		k.wantNoFigures(r)
	})

	t.Run("Skip", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		for i := 0; i < 10; i++ {
			r := k.get("/skipped", "t-small")
			k.wantOK(r)
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
			k.wantJSONError(r, adapterkit.CodeMissingTenant)
			k.wantNoFigures(r)
		}
		// The application's own answer lets them through, unlimited.
		for range Small.Limit.Burst + 1 {
			r := k.get("/public", "")
			k.wantOK(r)
			k.wantNoFigures(r)
		}
		k.wantFigures(k.get("/public", "t-small"), Small, Small.Limit.Burst-1, 1, 1)
	})

	t.Run("InvalidTenant", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		for _, tenant := range []string{
			strings.Repeat("t", maxTenantLength+1), "nul\x00byte", "\x00", "line\nbreak", "tab\there", "del\x7f",
		} {
			for _, path := range []string{"/limited", "/custom"} {
				r := k.get(path, tenant)
				k.wantStatus(r, http.StatusBadRequest)
				k.wantJSONError(r, adapterkit.CodeInvalidTenant)
				k.wantNoFigures(r)
			}
		}
		k.wantOK(k.get("/limited", strings.Repeat("t", maxTenantLength)))
		// A NUL byte in the header itself: whether the framework's server
		// refuses the request or the middleware does, it is a 400.
		if status := rawStatus(t, k.base, "/by-header", adapterkit.TenantHeader+": acme\x00evil"); status != http.StatusBadRequest {
			t.Errorf("a NUL byte in the tenant header: status %d, want 400", status)
		}
	})

	t.Run("TenantFromHeaderByDefault", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		r := k.get("/by-header", "t-big")
		k.wantOK(r)
		k.wantFigures(r, Big, Big.Limit.Burst-1, 1, 1)
		// The same bucket as the authenticated routes': the tenant is one.
		r = k.get("/limited", "t-big")
		k.wantFigures(r, Big, Big.Limit.Burst-2, 1, 1)
	})

	t.Run("CustomDenial", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		for i := int64(0); i < Small.Limit.Burst; i++ {
			k.wantOK(k.get("/custom", "t-small"))
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
		k.wantOK(r)
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
		k.wantOK(k.get("/reports/43", "t-big"))
		r = k.get("/reports/44", "t-big")
		k.wantStatus(r, http.StatusTooManyRequests)
		body := k.wantJSONError(r, adapterkit.CodeRateLimited)
		if body["policy"] != "big-reports" {
			t.Errorf("body policy = %v, want big-reports", body["policy"])
		}
		// The plan's own bucket spent 2 of 10 and nothing on the denial;
		// routes without the budget still pass.
		r = k.get("/limited", "t-big")
		k.wantOK(r)
		k.wantFigures(r, Big, 7, 1, 1)
		e := k.events.Last(t)
		if e.Policy != "big-reports" || !strings.Contains(e.Route, "reports") || strings.Contains(e.Route, "44") {
			t.Errorf("throttled decision: policy %q route %q; want big-reports and the router's pattern, not the path", e.Policy, e.Route)
		}
		if e.Tenant != "t-big" || e.Budget != Budget || e.Method != http.MethodGet {
			t.Errorf("throttled decision: tenant %q budget %q method %q", e.Tenant, e.Budget, e.Method)
		}
	})

	t.Run("RouteNameInTheLog", func(t *testing.T) {
		// With no Observer but its log, which reads the route of a
		// throttled request only, the middleware names routes for those
		// decisions alone: the log line names the pattern that an
		// Observer is given.
		observed := newKit(t, newServer, nil)
		for _, id := range []string{"42", "43", "44"} {
			observed.get("/reports/"+id, "t-big")
		}
		want := observed.events.Last(t).Route
		logs := &LogBuffer{}
		clock := storetest.NewClock()
		l, err := tollgate.New(storetest.NewModelStore(clock.Now), NewResolver(t),
			tollgate.WithLogger(slog.New(slog.NewTextHandler(logs, nil))), WithClock(clock.Now))
		if err != nil {
			t.Fatal(err)
		}
		k := connect(t, newServer.start(t, Setup{Limiter: l, Budget: Budget, Slow: NewSlowWork().Do}), clock, nil, nil, newServer.fields)
		k.wantOK(k.get("/reports/42", "t-big"))
		k.wantOK(k.get("/reports/43", "t-big"))
		k.wantStatus(k.get("/reports/44", "t-big"), http.StatusTooManyRequests)
		if n := logs.Count("request throttled"); n != 1 {
			t.Fatalf("%d lines of throttled requests, want 1:\n%s", n, logs)
		}
		got := "(none)"
		if m := routeLogged.FindStringSubmatch(logs.String()); m != nil {
			got = m[1]
			if unquoted, err := strconv.Unquote(got); err == nil {
				got = unquoted // as slog's text handler quotes a value with spaces
			}
		}
		if got != want {
			t.Errorf("the throttled request's line names route %q, want %q, the pattern an Observer is given:\n%s", got, want, logs)
		}
	})

	t.Run("BudgetNoPlanHas", func(t *testing.T) {
		logs := CaptureDefaultLog(t)
		const typo = "reprots"
		clock := storetest.NewClock()
		l, err := tollgate.New(storetest.NewModelStore(clock.Now), NewResolver(t), tollgate.WithLogger(nil), WithClock(clock.Now))
		if err != nil {
			t.Fatal(err)
		}
		k := connect(t, newServer.start(t, Setup{Limiter: l, Budget: typo, Slow: NewSlowWork().Do}), clock, nil, nil, newServer.fields)
		if logs.Count(misconfiguredMsg) != 1 || logs.Count(typo) != 1 {
			t.Errorf("building middleware with the budget %q logged, want one misconfiguration naming it:\n%s", typo, logs)
		}
		for range 2 {
			r := k.get("/reports/1", "t-big")
			k.wantStatus(r, http.StatusInternalServerError)
			k.wantJSONError(r, adapterkit.CodeInternalError)
			k.wantNoFigures(r)
		}
		k.wantFigures(k.get("/limited", "t-big"), Big, Big.Limit.Burst-1, 1, 1)
		if n := logs.Count(misconfiguredMsg); n != 1 {
			t.Errorf("the misconfiguration was logged %d times; want once, at build", n)
		}
	})

	t.Run("FailOpen", func(t *testing.T) {
		k := newKit(t, newServer, FailingStore{})
		r := k.get("/limited", "t-small")
		k.wantOK(r)
		k.wantNoFigures(r)
	})

	t.Run("FailClosed", func(t *testing.T) {
		k := newKit(t, newServer, FailingStore{}, tollgate.WithFailClosed(true))
		r := k.get("/limited", "t-small")
		k.wantStatus(r, http.StatusServiceUnavailable)
		k.wantJSONError(r, adapterkit.CodeUnavailable)
		k.wantNoFigures(r)
	})

	t.Run("Shadow", func(t *testing.T) {
		k := newKit(t, newServer, nil, tollgate.WithShadow())
		for range Small.Limit.Burst + 2 {
			r := k.get("/limited", "t-small")
			k.wantOK(r)
			k.wantNoFigures(r)
		}
		if e := k.events.Last(t); e.Outcome() != "shadow_denied" || e.Tenant != "t-small" {
			t.Errorf("last throttled decision: %s of %q, want shadow_denied of t-small", e.Outcome(), e.Tenant)
		}
	})

	t.Run("ShadowHeaders", func(t *testing.T) {
		k := newKit(t, newServer, nil, tollgate.WithShadow(Small.Name), tollgate.WithShadowHeaders(true))
		for i := int64(1); i <= Small.Limit.Burst+1; i++ {
			r := k.get("/limited", "t-small")
			k.wantOK(r)
			k.wantFigures(r, Small, max(Small.Limit.Burst-i, 0), min(i, Small.Limit.Burst), 1)
		}
		// Other plans are enforced.
		for range Tiny.Limit.Burst {
			k.get("/limited", "t-tiny")
		}
		k.wantStatus(k.get("/limited", "t-tiny"), http.StatusTooManyRequests)
	})

	t.Run("HostileTenants", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		for _, tenant := range []string{
			strings.Repeat("A", 200), "{x}", "%00", "\u00e9\u00e8", "\xff\xfe", "t-small ", " t-small", `"quoted"`, "a,b", "../../x",
		} {
			r := k.get("/limited", tenant)
			k.wantOK(r)
			if got := r.header.Get("X-RateLimit-Remaining"); got != "2" {
				t.Errorf("tenant %.20q: X-RateLimit-Remaining = %q, want 2 (a bucket of its own)", tenant, got)
			}
		}
	})

	t.Run("NilLimiter", func(t *testing.T) {
		logs := CaptureDefaultLog(t)
		k := connect(t, newServer.start(t, Setup{Budget: Budget, Slow: NewSlowWork().Do}), nil, nil, nil, newServer.fields)
		built := logs.Count(misconfiguredMsg)
		if built == 0 || !strings.Contains(logs.String(), adapterkit.ErrNoLimiter.Error()) {
			t.Errorf("building middleware without a Limiter logged no misconfiguration naming it:\n%s", logs)
		}
		for _, path := range []string{"/limited", "/skipped", "/costly", "/custom", "/public", "/reports/1", "/by-header", "/held", "/slow", "/slow-held"} {
			for range 2 {
				r := k.get(path, "t-small")
				k.wantStatus(r, http.StatusInternalServerError)
				k.wantJSONError(r, adapterkit.CodeInternalError)
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

	t.Run("InFlight", func(t *testing.T) { runInFlight(t, newServer) })

	t.Run("ShadowNeverHolds", func(t *testing.T) { runShadowNeverHolds(t, newServer) })

	t.Run("ConcurrentRequests", func(t *testing.T) {
		k := newKit(t, newServer, nil)
		var mu sync.Mutex
		statuses := map[int]int{}
		var wg sync.WaitGroup
		for range 40 {
			wg.Go(func() {
				req, _ := http.NewRequest(http.MethodGet, k.base+"/limited", nil)
				req.Header.Set(adapterkit.TenantHeader, "t-big")
				resp, err := k.client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				k.check(response{resp.StatusCode, resp.Header, string(body)})
				mu.Lock()
				statuses[resp.StatusCode]++
				mu.Unlock()
			})
		}
		wg.Wait()
		if statuses[http.StatusOK] != int(Big.Limit.Burst) || statuses[http.StatusTooManyRequests] != 40-int(Big.Limit.Burst) {
			t.Fatalf("statuses %v, want exactly %d x 200 and the rest 429 with the clock stopped", statuses, Big.Limit.Burst)
		}
	})
}
