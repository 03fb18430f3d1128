package tollgateecho_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/dunglas/httpsfv"
	"github.com/labstack/echo/v4"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adapterkit"
	"github.com/tollgate-go/tollgate/core/adaptertest"
	tollgateecho "github.com/tollgate-go/tollgate/echo"
)

func ok(c echo.Context) error { return c.String(http.StatusOK, "ok") }

func newEcho() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Logger.SetOutput(io.Discard)
	return e
}

func serve(t *testing.T, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// tenantKey is where authenticate stores the tenant in the Echo context,
// whose keys are strings.
const tenantKey = "tenant"

// authenticate is the kit's authentication in Echo's idiom.
func authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Request().Header
		if tenant := adaptertest.Tenant(h.Get("X-Tenant-ID"), h.Get(adaptertest.EscapedTenantHeader)); tenant != "" {
			c.Set(tenantKey, tenant)
		}
		return next(c)
	}
}

// fields parses header values with a parser of structured fields that is
// not tollgate's.
var fields = adaptertest.FieldParsers{
	List: func(v string) error { _, err := httpsfv.UnmarshalList([]string{v}); return err },
	Item: func(v string) error { _, err := httpsfv.UnmarshalItem([]string{v}); return err },
}

// slow is the handler of the kit's in-flight routes.
func slow(s adaptertest.Setup) echo.HandlerFunc {
	return func(c echo.Context) error {
		s.Slow(c.Request().Context(), c.Request().Header.Get(adaptertest.SlowHeader))
		return c.String(http.StatusOK, "ok")
	}
}

func TestConformance(t *testing.T) {
	adaptertest.RunWith(t, func(t *testing.T, s adaptertest.Setup) string {
		cfg := tollgateecho.Config{Limiter: s.Limiter, Tenant: tollgateecho.TenantFromContext(tenantKey)}
		with := func(edit func(*tollgateecho.Config)) echo.MiddlewareFunc {
			c := cfg
			edit(&c)
			return tollgateecho.MiddlewareWithConfig(c)
		}
		limit := with(func(c *tollgateecho.Config) {
			c.Skipper = func(c echo.Context) bool { return c.Path() == "/skipped" }
		})
		e := newEcho()
		e.Use(authenticate)
		e.GET("/limited", ok, limit)
		e.GET("/skipped", ok, limit)
		e.GET("/costly", ok, with(func(c *tollgateecho.Config) { c.Cost = 5 }))
		e.GET("/custom", ok, with(func(c *tollgateecho.Config) {
			c.DenyHandler = func(c echo.Context, d tollgate.Decision) error {
				return c.JSON(http.StatusTeapot, map[string]string{"denied": d.Tenant})
			}
		}))
		e.GET("/public", ok, with(func(c *tollgateecho.Config) {
			c.MissingTenantHandler = func(c echo.Context, next echo.HandlerFunc) error { return next(c) }
		}))
		e.GET("/reports/:id", ok, with(func(c *tollgateecho.Config) { c.Budget = s.Budget }))
		e.GET("/by-header", ok, tollgateecho.Middleware(s.Limiter))
		e.GET("/held", ok, with(func(c *tollgateecho.Config) { c.MaxDelay = adaptertest.HeldDelay }))
		e.GET("/slow", slow(s), with(func(*tollgateecho.Config) {}))
		e.GET("/slow-held", slow(s), with(func(c *tollgateecho.Config) { c.MaxDelay = adaptertest.SlotDelay }))
		return serve(t, e)
	}, fields)
}

// TestClientIP runs on a default Echo, whose c.RealIP believes
// X-Forwarded-For from every peer; the adapter believes it only from the
// proxies it is given.
func TestClientIP(t *testing.T) {
	adaptertest.RunClientIP(t, func(t *testing.T, l *tollgate.Limiter, trusted []netip.Prefix) string {
		e := newEcho()
		e.GET("/ip", ok, tollgateecho.MiddlewareWithConfig(tollgateecho.Config{Limiter: l, Tenant: tollgateecho.TenantFromClientIP(trusted...)}))
		return serve(t, e)
	})
}

// TestClientIPIgnoresIPExtractor: Echo's XFF extractor trusts private
// peers by default; the adapter still needs its own list.
func TestClientIPIgnoresIPExtractor(t *testing.T) {
	l, _, _ := adaptertest.NewLimiter(t, tollgate.SinglePlan(three))
	e := newEcho()
	e.IPExtractor = echo.ExtractIPFromXFFHeader()
	e.GET("/ip", ok, tollgateecho.MiddlewareWithConfig(tollgateecho.Config{Limiter: l, Tenant: tollgateecho.TenantFromClientIP()}))
	for i, want := range []string{"2", "1", "0"} {
		w := adaptertest.Serve(e, "GET", "/ip", "10.1.2.3:4711", "X-Forwarded-For", "203.0.113."+string(rune('1'+i)))
		if w.Status != http.StatusOK || w.Header.Get("X-RateLimit-Remaining") != want {
			t.Fatalf("request %d: status %d, remaining %q; want 200 and %s: one bucket for the peer",
				i+1, w.Status, w.Header.Get("X-RateLimit-Remaining"), want)
		}
	}
}

var three = tollgate.Plan{Name: "three", Limit: tollgate.Limit{Rate: 1, Burst: 3}}

// TestRegistration registers the middleware in each way Echo allows and
// checks that the limit applies where it is registered and nowhere else.
func TestRegistration(t *testing.T) {
	l, _, _ := adaptertest.NewLimiter(t, tollgate.SinglePlan(three))
	limit := tollgateecho.Middleware(l)

	e := newEcho()
	e.GET("/open", ok)
	e.GET("/single", ok, limit)
	api := e.Group("/api", limit)
	api.GET("/a", ok)
	api.GET("/b", ok)

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
		w := adaptertest.Serve(tc.h, tc.method, tc.path, "", "X-Tenant-ID", "t-"+tc.path)
		if w.Status != http.StatusOK || w.Body != "ok" {
			t.Errorf("%s %s: status %d body %q, want 200 ok", tc.method, tc.path, w.Status, w.Body)
		}
		if got := w.Header.Get("X-RateLimit-Limit") != ""; got != tc.limited {
			t.Errorf("%s %s: limited = %v, want %v", tc.method, tc.path, got, tc.limited)
		}
	}
	// The group's routes share each tenant's bucket.
	adaptertest.Serve(e, "GET", "/api/b", "", "X-Tenant-ID", "shared")
	if got := adaptertest.Serve(e, "GET", "/api/a", "", "X-Tenant-ID", "shared").Header.Get("X-RateLimit-Remaining"); got != "1" {
		t.Errorf("second request in the group: remaining %q, want 1", got)
	}
}

// TestDefaultErrorHandler: the denial is an *echo.HTTPError that Echo's own
// error handler renders as problem details JSON, with the media type the
// middleware set, even in debug mode without internal text, and without a
// body for HEAD.
func TestDefaultErrorHandler(t *testing.T) {
	l, _, _ := adaptertest.NewLimiter(t, tollgate.SinglePlan(three))
	e := newEcho()
	e.Debug = true
	e.Match([]string{"GET", "HEAD"}, "/items/:id", ok, tollgateecho.Middleware(l))
	for range 3 {
		adaptertest.Serve(e, "GET", "/items/1", "", "X-Tenant-ID", "acme")
	}
	w := adaptertest.Serve(e, "GET", "/items/42", "", "X-Tenant-ID", "acme")
	if w.Status != http.StatusTooManyRequests || w.Header.Get("Retry-After") != "1" {
		t.Fatalf("status %d Retry-After %q, want 429 and 1", w.Status, w.Header.Get("Retry-After"))
	}
	if ct := w.Header.Get("Content-Type"); ct != adapterkit.ProblemContentType {
		t.Errorf("Content-Type %q, want %s", ct, adapterkit.ProblemContentType)
	}
	var body adapterkit.Body
	if err := json.Unmarshal([]byte(w.Body), &body); err != nil || body.Error != adapterkit.CodeRateLimited || body.RetryAfter != 1 || body.Policy != "three" ||
		body.Type != adapterkit.ProblemQuotaExceeded || body.Status != http.StatusTooManyRequests || body.Violated != "three" {
		t.Errorf("body %q (%v), want quota-exceeded by three, with retry_after 1", w.Body, err)
	}

	w = adaptertest.Serve(e, "HEAD", "/items/42", "", "X-Tenant-ID", "acme")
	if w.Status != http.StatusTooManyRequests || w.Header.Get("X-RateLimit-Remaining") != "0" || w.Body != "" {
		t.Errorf("HEAD: status %d remaining %q body %q, want 429, 0 and none", w.Status, w.Header.Get("X-RateLimit-Remaining"), w.Body)
	}
}

// TestAppErrorHandler renders the denial with the application's own
// HTTPErrorHandler, here as RFC 9457 problem details, reading the body
// through its JSON, as an application that does not import tollgate's
// adapter kit does.
func TestAppErrorHandler(t *testing.T) {
	l, _, _ := adaptertest.NewLimiter(t, tollgate.SinglePlan(three))
	e := newEcho()
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		var he *echo.HTTPError
		if !errors.As(err, &he) {
			c.NoContent(http.StatusInternalServerError)
			return
		}
		problem := map[string]any{"status": he.Code, "title": http.StatusText(he.Code)}
		var body struct{ Error, Message string }
		if b, err := json.Marshal(he.Message); err == nil && json.Unmarshal(b, &body) == nil {
			problem["type"] = "https://errors.example.com/" + body.Error
			problem["detail"] = body.Message
		}
		c.Response().Header().Set(echo.HeaderContentType, "application/problem+json")
		c.Response().WriteHeader(he.Code)
		json.NewEncoder(c.Response()).Encode(problem)
	}
	e.GET("/x", ok, tollgateecho.Middleware(l))

	for range 3 {
		adaptertest.Serve(e, "GET", "/x", "", "X-Tenant-ID", "acme")
	}
	w := adaptertest.Serve(e, "GET", "/x", "", "X-Tenant-ID", "acme")
	if w.Status != http.StatusTooManyRequests || w.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("status %d Content-Type %q, want the application's 429 problem", w.Status, w.Header.Get("Content-Type"))
	}
	for _, h := range []string{"Retry-After", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit"} {
		if w.Header.Get(h) == "" {
			t.Errorf("%s missing from the application's answer", h)
		}
	}
	var problem map[string]any
	if err := json.Unmarshal([]byte(w.Body), &problem); err != nil || problem["type"] != "https://errors.example.com/rate_limited" {
		t.Errorf("body %q, want the application's problem for rate_limited", w.Body)
	}

	w = adaptertest.Serve(e, "GET", "/x", "")
	if w.Status != http.StatusUnauthorized || !strings.Contains(w.Body, "missing_tenant") {
		t.Errorf("no tenant: status %d body %q, want the application's 401 problem", w.Status, w.Body)
	}
}

// TestMissingTenantHandler: in Echo's idiom the handler gets next, to let
// the request through unlimited, or returns an error of its own.
func TestMissingTenantHandler(t *testing.T) {
	l, _, _ := adaptertest.NewLimiter(t, tollgate.SinglePlan(three))
	e := newEcho()
	e.GET("/public", ok, tollgateecho.MiddlewareWithConfig(tollgateecho.Config{
		Limiter:              l,
		MissingTenantHandler: func(c echo.Context, next echo.HandlerFunc) error { return next(c) },
	}))
	e.GET("/private", ok, tollgateecho.MiddlewareWithConfig(tollgateecho.Config{
		Limiter: l,
		MissingTenantHandler: func(c echo.Context, _ echo.HandlerFunc) error {
			return echo.NewHTTPError(http.StatusForbidden, "log in")
		},
	}))

	if w := adaptertest.Serve(e, "GET", "/public", ""); w.Status != http.StatusOK || w.Body != "ok" || w.Header.Get("X-RateLimit-Limit") != "" {
		t.Errorf("/public: status %d body %q limit %q, want an unlimited 200", w.Status, w.Body, w.Header.Get("X-RateLimit-Limit"))
	}
	if w := adaptertest.Serve(e, "GET", "/private", ""); w.Status != http.StatusForbidden || !strings.Contains(w.Body, "log in") {
		t.Errorf("/private: status %d body %q, want the application's 403", w.Status, w.Body)
	}
}

// TestInvalidConfig: ToMiddleware reports the mistake; MiddlewareWithConfig
// hands it to the error handler as the 500's Internal error.
func TestInvalidConfig(t *testing.T) {
	if mw, err := (tollgateecho.Config{}).ToMiddleware(); !errors.Is(err, adapterkit.ErrNoLimiter) || mw != nil {
		t.Fatalf("ToMiddleware without a Limiter = %v, %v; want ErrNoLimiter", mw, err)
	}
	l, _, _ := adaptertest.NewLimiter(t, adaptertest.NewResolver(t))
	for _, budget := range []string{"no spaces", "reprots"} {
		if _, err := (tollgateecho.Config{Limiter: l, Budget: budget}).ToMiddleware(); err == nil || !strings.Contains(err.Error(), budget) {
			t.Errorf("ToMiddleware with the Budget %q no plan has: %v, want an error naming it", budget, err)
		}
	}

	adaptertest.CaptureDefaultLog(t)
	e := newEcho()
	e.GET("/x", ok, tollgateecho.Middleware(nil))
	var seen error
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		seen = err
		e.DefaultHTTPErrorHandler(err, c)
	}
	w := adaptertest.Serve(e, "GET", "/x", "", "X-Tenant-ID", "acme")
	if w.Status != http.StatusInternalServerError || strings.Contains(w.Body, "nil") {
		t.Fatalf("status %d body %q, want 500 without the cause", w.Status, w.Body)
	}
	if !errors.Is(seen, adapterkit.ErrNoLimiter) {
		t.Errorf("the error handler saw %v, want the configuration error as Internal", seen)
	}
}

func TestDefaultConfigUnchanged(t *testing.T) {
	l, _, _ := adaptertest.NewLimiter(t, tollgate.SinglePlan(three))
	_ = tollgateecho.Middleware(l)
	if tollgateecho.DefaultConfig.Limiter != nil {
		t.Fatal("Middleware changed DefaultConfig")
	}
}
