package tollgateecho_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adaptertest"
	tollgateecho "github.com/tollgate-go/tollgate/echo"
)

func ok(c echo.Context) error { return c.String(http.StatusOK, "ok") }

func newEcho() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	return e
}

func TestConformance(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T, s adaptertest.Setup) string {
		limit := tollgateecho.MiddlewareWithConfig(tollgateecho.Config{
			Limiter: s.Limiter,
			Skipper: func(c echo.Context) bool { return c.Path() == "/skipped" },
		})
		costly := tollgateecho.MiddlewareWithConfig(tollgateecho.Config{Limiter: s.Limiter, Cost: 5})
		custom := tollgateecho.MiddlewareWithConfig(tollgateecho.Config{
			Limiter: s.Limiter,
			DenyHandler: func(c echo.Context, d tollgate.Decision) error {
				return c.JSON(http.StatusTeapot, map[string]string{"denied": d.Tenant})
			},
		})
		e := newEcho()
		e.GET("/limited", ok, limit)
		e.GET("/skipped", ok, limit)
		e.GET("/costly", ok, costly)
		e.GET("/custom", ok, custom)
		srv := httptest.NewServer(e)
		t.Cleanup(srv.Close)
		return srv.URL
	})
}

// newLimiter returns a Limiter over plan for every tenant, on a stopped
// clock, that records the throttle events it reports.
func newLimiter(t *testing.T, plan tollgate.Plan) (*tollgate.Limiter, *adaptertest.Events) {
	l, ev, _ := adaptertest.NewLimiter(t, tollgate.SinglePlan(plan))
	return l, ev
}

var three = tollgate.Plan{Name: "three", Limit: tollgate.Limit{Rate: 1, Burst: 3}}

// serve sends one request through h in process; setup may change it first.
func serve(h http.Handler, method, target string, setup func(*http.Request)) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, nil)
	if setup != nil {
		setup(req)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func tenant(id string) func(*http.Request) {
	return func(r *http.Request) { r.Header.Set("X-Tenant-ID", id) }
}

func TestTenantFromContext(t *testing.T) {
	l, _ := newLimiter(t, three)
	e := newEcho()
	// The application's authentication middleware puts the principal in
	// the Echo context; a header no longer names the tenant.
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if tok := c.Request().Header.Get("Authorization"); strings.HasPrefix(tok, "Bearer ") {
				c.Set("tenant", strings.TrimPrefix(tok, "Bearer "))
			}
			return next(c)
		}
	})
	e.Use(tollgateecho.MiddlewareWithConfig(tollgateecho.Config{Limiter: l, Tenant: tollgateecho.TenantFromContext("tenant")}))
	e.GET("/x", ok)

	auth := func(tok string) func(*http.Request) {
		return func(r *http.Request) {
			r.Header.Set("Authorization", "Bearer "+tok)
			r.Header.Set("X-Tenant-ID", "someone-else")
		}
	}
	for i, want := range []string{"2", "1", "0"} {
		w := serve(e, "GET", "/x", auth("acme"))
		if w.Code != http.StatusOK || w.Header().Get("X-RateLimit-Remaining") != want {
			t.Fatalf("request %d: status %d, remaining %q, want 200 and %q", i, w.Code, w.Header().Get("X-RateLimit-Remaining"), want)
		}
	}
	if w := serve(e, "GET", "/x", auth("acme")); w.Code != http.StatusTooManyRequests {
		t.Fatalf("4th request of acme: status %d, want 429", w.Code)
	}
	if w := serve(e, "GET", "/x", auth("globex")); w.Code != http.StatusOK {
		t.Fatalf("globex: status %d, want 200 (a bucket of its own)", w.Code)
	}
	if w := serve(e, "GET", "/x", tenant("acme")); w.Code != http.StatusUnauthorized {
		t.Fatalf("no principal: status %d, want 401", w.Code)
	}
}

type principal struct{ id string }

func (p principal) String() string { return p.id }

func TestTenantFromContextStringer(t *testing.T) {
	l, _ := newLimiter(t, three)
	e := newEcho()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { c.Set("user", principal{"acme"}); return next(c) }
	})
	e.GET("/x", ok, tollgateecho.MiddlewareWithConfig(tollgateecho.Config{Limiter: l, Tenant: tollgateecho.TenantFromContext("user")}))
	if w := serve(e, "GET", "/x", nil); w.Code != http.StatusOK || w.Header().Get("X-RateLimit-Remaining") != "2" {
		t.Fatalf("status %d, remaining %q, want 200 and 2", w.Code, w.Header().Get("X-RateLimit-Remaining"))
	}
}

func TestTenantFromClientIP(t *testing.T) {
	cases := []struct {
		name      string
		extractor echo.IPExtractor // nil: Echo's default, which would believe any X-Forwarded-For
		peer      string
		xff       []string // one request each
		want      []string // X-RateLimit-Remaining of each
	}{
		{
			name: "no IPExtractor, spoofed X-Forwarded-For", peer: "198.51.100.9:4711",
			xff:  []string{"203.0.113.1", "", "203.0.113.3"},
			want: []string{"2", "1", "0"},
		},
		{
			name: "ExtractIPDirect, spoofed X-Forwarded-For", extractor: echo.ExtractIPDirect(), peer: "10.1.2.3:4711",
			xff:  []string{"203.0.113.1", "203.0.113.2", "203.0.113.3"},
			want: []string{"2", "1", "0"},
		},
		{
			// Echo's XFF extractor trusts loopback, link-local and
			// private peers by default; this one is public.
			name: "untrusted peer", extractor: echo.ExtractIPFromXFFHeader(), peer: "198.51.100.9:4711",
			xff:  []string{"203.0.113.1", "203.0.113.2", "203.0.113.3"},
			want: []string{"2", "1", "0"},
		},
		{
			name: "trusted proxy", extractor: echo.ExtractIPFromXFFHeader(), peer: "10.1.2.3:4711",
			xff:  []string{"203.0.113.1", "203.0.113.2", "203.0.113.1", "1.2.3.4, 203.0.113.2"},
			want: []string{"2", "2", "1", "1"},
		},
		{
			// One IPv6 client holds a /64: its addresses share a bucket.
			name: "IPv6 clients by /64", extractor: echo.ExtractIPFromXFFHeader(), peer: "10.1.2.3:4711",
			xff:  []string{"2001:db8:1:2::1", "2001:db8:1:2::ffff", "2001:db8:1:3::1"},
			want: []string{"2", "1", "2"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := newLimiter(t, three)
			e := newEcho()
			e.IPExtractor = tc.extractor
			e.GET("/x", ok, tollgateecho.MiddlewareWithConfig(tollgateecho.Config{Limiter: l, Tenant: tollgateecho.TenantFromClientIP()}))
			for i, xff := range tc.xff {
				w := serve(e, "GET", "/x", func(req *http.Request) {
					req.RemoteAddr = tc.peer
					if xff != "" {
						req.Header.Set("X-Forwarded-For", xff)
					}
				})
				if got := w.Header().Get("X-RateLimit-Remaining"); w.Code != http.StatusOK || got != tc.want[i] {
					t.Errorf("request %d (X-Forwarded-For %q): status %d, remaining %q, want 200 and %q", i, xff, w.Code, got, tc.want[i])
				}
			}
		})
	}
}

// TestTenantFromClientIPOverHTTP checks the key through a real connection
// to an Echo without an IPExtractor.
func TestTenantFromClientIPOverHTTP(t *testing.T) {
	l, _ := newLimiter(t, three)
	e := newEcho()
	e.GET("/x", ok, tollgateecho.MiddlewareWithConfig(tollgateecho.Config{Limiter: l, Tenant: tollgateecho.TenantFromClientIP()}))
	srv := httptest.NewServer(e)
	defer srv.Close()
	for i, want := range []string{"2", "1"} {
		req, _ := http.NewRequest("GET", srv.URL+"/x", nil)
		req.Header.Set("X-Forwarded-For", "203.0.113."+string(rune('1'+i)))
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if got := resp.Header.Get("X-RateLimit-Remaining"); got != want {
			t.Errorf("request %d: remaining %q, want %q: a spoofed X-Forwarded-For changed the key", i, got, want)
		}
	}
}

func TestRegistration(t *testing.T) {
	l, _ := newLimiter(t, three)
	limit := tollgateecho.Middleware(l)

	e := newEcho()
	e.GET("/open", ok)
	// A single route.
	e.GET("/single", ok, limit)
	// A group.
	api := e.Group("/api", limit)
	api.GET("/a", ok)
	api.GET("/b", ok)

	// The whole router.
	all := newEcho()
	all.Use(limit)
	all.GET("/any", ok)
	all.POST("/any", ok)

	for _, tc := range []struct {
		h       http.Handler
		method  string
		path    string
		limited bool
	}{
		{e, "GET", "/open", false},
		{e, "GET", "/single", true},
		{e, "GET", "/api/a", true},
		{e, "GET", "/api/b", true},
		{all, "GET", "/any", true},
		{all, "POST", "/any", true},
	} {
		w := serve(tc.h, tc.method, tc.path, tenant("t-"+tc.path))
		if w.Code != http.StatusOK || w.Body.String() != "ok" {
			t.Errorf("%s %s: status %d body %q, want 200 ok", tc.method, tc.path, w.Code, w.Body)
		}
		if got := w.Header().Get("X-RateLimit-Limit") != ""; got != tc.limited {
			t.Errorf("%s %s: limited = %v, want %v", tc.method, tc.path, got, tc.limited)
		}
	}
	// The group's routes share each tenant's bucket.
	serve(e, "GET", "/api/b", tenant("shared"))
	if got := serve(e, "GET", "/api/a", tenant("shared")).Header().Get("X-RateLimit-Remaining"); got != "1" {
		t.Errorf("second request in the group: remaining %q, want 1", got)
	}
}

func TestCostPerRoute(t *testing.T) {
	l, _ := newLimiter(t, tollgate.Plan{Name: "ten", Limit: tollgate.Limit{Rate: 1, Burst: 10}})
	byMethod := tollgateecho.MiddlewareWithConfig(tollgateecho.Config{Limiter: l, CostFunc: func(c echo.Context) int64 {
		if c.Request().Method == http.MethodPost {
			return 4
		}
		return 0 // counts as 1
	}})
	e := newEcho()
	e.GET("/reports", ok, byMethod)
	e.POST("/reports", ok, byMethod)
	e.GET("/export", ok, tollgateecho.MiddlewareWithConfig(tollgateecho.Config{Limiter: l, Cost: 3}))

	for _, step := range []struct {
		method, path string
		status       int
		remaining    string
	}{
		{"GET", "/reports", 200, "9"},
		{"POST", "/reports", 200, "5"},
		{"GET", "/export", 200, "2"},
		{"GET", "/export", 429, "2"},
		{"POST", "/reports", 429, "2"},
		{"GET", "/reports", 200, "1"},
	} {
		w := serve(e, step.method, step.path, tenant("acme"))
		if w.Code != step.status || w.Header().Get("X-RateLimit-Remaining") != step.remaining {
			t.Fatalf("%s %s: status %d remaining %q, want %d and %q", step.method, step.path, w.Code,
				w.Header().Get("X-RateLimit-Remaining"), step.status, step.remaining)
		}
	}
}

func TestDefaultErrorHandler(t *testing.T) {
	l, ev := newLimiter(t, three)
	e := newEcho()
	e.Debug = true // even then, no internal text in the body
	e.Match([]string{"GET", "HEAD"}, "/items/:id", ok, tollgateecho.Middleware(l))
	for i := 0; i < 3; i++ {
		serve(e, "GET", "/items/1", tenant("acme"))
	}
	w := serve(e, "GET", "/items/42", tenant("acme"))
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("status %d Retry-After %q, want 429 and 1", w.Code, w.Header().Get("Retry-After"))
	}
	if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type %q, want JSON", ct)
	}
	var body tollgate.ResponseBody
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Error != tollgate.CodeRateLimited || body.RetryAfter != 1 {
		t.Errorf("body %q (%v), want rate_limited with retry_after 1", w.Body, err)
	}
	got := ev.All()
	if len(got) != 1 || got[0].Route != "/items/:id" || got[0].Method != "GET" || got[0].Tenant != "acme" {
		t.Errorf("throttle events %+v, want one for GET /items/:id of acme", got)
	}

	// A HEAD request gets the status and headers without a body.
	w = serve(e, "HEAD", "/items/42", tenant("acme"))
	if w.Code != http.StatusTooManyRequests || w.Header().Get("X-RateLimit-Remaining") != "0" || w.Body.Len() != 0 {
		t.Errorf("HEAD: status %d remaining %q body %q, want 429, 0 and none", w.Code, w.Header().Get("X-RateLimit-Remaining"), w.Body)
	}
}

// TestAppErrorHandler renders the denial with the application's own
// HTTPErrorHandler, here as RFC 9457 problem details.
func TestAppErrorHandler(t *testing.T) {
	l, _ := newLimiter(t, three)
	e := newEcho()
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		var he *echo.HTTPError
		if !errors.As(err, &he) {
			c.NoContent(http.StatusInternalServerError)
			return
		}
		problem := map[string]any{"status": he.Code, "title": http.StatusText(he.Code)}
		if body, ok := he.Message.(tollgate.ResponseBody); ok {
			problem["type"] = "https://errors.example.com/" + body.Error
			problem["detail"] = body.Message
		}
		c.Response().Header().Set(echo.HeaderContentType, "application/problem+json")
		c.Response().WriteHeader(he.Code)
		json.NewEncoder(c.Response()).Encode(problem)
	}
	e.GET("/x", ok, tollgateecho.Middleware(l))

	for i := 0; i < 3; i++ {
		serve(e, "GET", "/x", tenant("acme"))
	}
	w := serve(e, "GET", "/x", tenant("acme"))
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("status %d Content-Type %q, want the application's 429 problem", w.Code, w.Header().Get("Content-Type"))
	}
	for _, h := range []string{"Retry-After", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit"} {
		if w.Header().Get(h) == "" {
			t.Errorf("%s missing from the application's answer", h)
		}
	}
	var problem map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &problem); err != nil || problem["type"] != "https://errors.example.com/rate_limited" {
		t.Errorf("body %q, want the application's problem for rate_limited", w.Body)
	}

	w = serve(e, "GET", "/x", nil)
	if w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), "missing_tenant") {
		t.Errorf("no tenant: status %d body %q, want the application's 401 problem", w.Code, w.Body)
	}
}

func TestMissingTenantHandler(t *testing.T) {
	l, _ := newLimiter(t, three)
	e := newEcho()
	// Anonymous requests go through unlimited.
	e.GET("/public", ok, tollgateecho.MiddlewareWithConfig(tollgateecho.Config{
		Limiter:              l,
		MissingTenantHandler: func(c echo.Context, next echo.HandlerFunc) error { return next(c) },
	}))
	// Or get an answer of the application's own.
	e.GET("/private", ok, tollgateecho.MiddlewareWithConfig(tollgateecho.Config{
		Limiter: l,
		MissingTenantHandler: func(c echo.Context, _ echo.HandlerFunc) error {
			return echo.NewHTTPError(http.StatusForbidden, "log in")
		},
	}))

	if w := serve(e, "GET", "/public", nil); w.Code != http.StatusOK || w.Body.String() != "ok" || w.Header().Get("X-RateLimit-Limit") != "" {
		t.Errorf("/public: status %d body %q limit %q, want an unlimited 200", w.Code, w.Body, w.Header().Get("X-RateLimit-Limit"))
	}
	if w := serve(e, "GET", "/private", nil); w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "log in") {
		t.Errorf("/private: status %d body %q, want the application's 403", w.Code, w.Body)
	}
}

func TestInvalidConfig(t *testing.T) {
	if mw, err := (tollgateecho.Config{}).ToMiddleware(); err == nil || mw != nil {
		t.Fatalf("ToMiddleware without a Limiter = %v, %v; want an error", mw, err)
	}

	e := newEcho()
	e.Logger.SetOutput(io.Discard)
	e.GET("/x", ok, tollgateecho.Middleware(nil))
	var seen error
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		seen = err
		e.DefaultHTTPErrorHandler(err, c)
	}
	w := serve(e, "GET", "/x", tenant("acme"))
	if w.Code != http.StatusInternalServerError || strings.Contains(w.Body.String(), "nil") {
		t.Fatalf("status %d body %q, want 500 without the cause", w.Code, w.Body)
	}
	var body tollgate.ResponseBody
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Error != tollgate.CodeInternalError {
		t.Errorf("body %q, want internal_error", w.Body)
	}
	if seen == nil || !strings.Contains(seen.Error(), "Limiter is nil") {
		t.Errorf("the error handler saw %v, want the configuration error as Internal", seen)
	}
}

func TestDefaultConfigUnchanged(t *testing.T) {
	l, _ := newLimiter(t, three)
	_ = tollgateecho.Middleware(l)
	if tollgateecho.DefaultConfig.Limiter != nil {
		t.Fatal("Middleware changed DefaultConfig")
	}
}
