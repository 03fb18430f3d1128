package tollgateechov5_test

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
	"github.com/labstack/echo/v5"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adapterkit"
	"github.com/tollgate-go/tollgate/core/adaptertest"
	tollgateechov5 "github.com/tollgate-go/tollgate/echov5"
)

func ok(c *echo.Context) error { return c.String(http.StatusOK, "ok") }

// serve runs e on a loopback server until the test ends and returns its
// base URL.
func serve(t *testing.T, e *echo.Echo) string {
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv.URL
}

// tenantKey is where authenticate keeps the tenant in the Echo context,
// whose keys are strings.
const tenantKey = "tenant"

// authenticate is the kit's authentication: it keeps the X-Tenant-ID
// header in the Echo context.
func authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error {
		h := c.Request().Header
		if tenant := adaptertest.Tenant(h.Get("X-Tenant-ID"), h.Get(adaptertest.EscapedTenantHeader)); tenant != "" {
			c.Set(tenantKey, tenant)
		}
		return next(c)
	}
}

var byPrincipal = tollgateechov5.TenantFromContext(tenantKey)

// fields parses header values with a parser of structured fields that is
// not tollgate's.
var fields = adaptertest.FieldParsers{
	List: func(v string) error { _, err := httpsfv.UnmarshalList([]string{v}); return err },
	Item: func(v string) error { _, err := httpsfv.UnmarshalItem([]string{v}); return err },
}

// slow is the handler of the kit's in-flight routes.
func slow(s adaptertest.Setup) echo.HandlerFunc {
	return func(c *echo.Context) error {
		s.Slow(c.Request().Context(), c.Request().Header.Get(adaptertest.SlowHeader))
		return c.String(http.StatusOK, "ok")
	}
}

func TestConformance(t *testing.T) {
	adaptertest.RunWith(t, func(t *testing.T, s adaptertest.Setup) string {
		cfg := tollgateechov5.Config{Limiter: s.Limiter, Tenant: byPrincipal}
		with := func(change func(*tollgateechov5.Config)) echo.MiddlewareFunc {
			c := cfg
			change(&c)
			return tollgateechov5.MiddlewareWithConfig(c)
		}
		limit := with(func(c *tollgateechov5.Config) {
			c.Skipper = func(c *echo.Context) bool { return c.Path() == "/skipped" }
		})
		e := echo.New()
		e.Use(authenticate)
		e.GET("/limited", ok, limit)
		e.GET("/skipped", ok, limit)
		e.GET("/costly", ok, with(func(c *tollgateechov5.Config) { c.Cost = 5 }))
		e.GET("/custom", ok, with(func(c *tollgateechov5.Config) {
			c.DenyHandler = func(c *echo.Context, d tollgate.Decision) error {
				return c.JSON(http.StatusTeapot, map[string]string{"denied": d.Tenant})
			}
		}))
		e.GET("/public", ok, with(func(c *tollgateechov5.Config) {
			c.MissingTenantHandler = func(c *echo.Context, next echo.HandlerFunc) error { return next(c) }
		}))
		e.GET("/reports/:id", ok, with(func(c *tollgateechov5.Config) { c.Budget = s.Budget }))
		e.GET("/by-header", ok, tollgateechov5.Middleware(s.Limiter))
		e.GET("/held", ok, with(func(c *tollgateechov5.Config) { c.MaxDelay = adaptertest.HeldDelay }))
		e.GET("/slow", slow(s), with(func(*tollgateechov5.Config) {}))
		e.GET("/slow-held", slow(s), with(func(c *tollgateechov5.Config) { c.MaxDelay = adaptertest.SlotDelay }))
		return serve(t, e)
	}, fields)
}

// newLimiter returns a Limiter of burst requests per tenant, refilled at
// one a minute on a stopped clock, that records its throttled decisions.
func newLimiter(t *testing.T, burst int64) (*tollgate.Limiter, *adaptertest.Events) {
	plan := tollgate.Plan{Name: "test", Limit: tollgate.Limit{Rate: 1.0 / 60, Burst: burst}}
	l, ev, _ := adaptertest.NewLimiter(t, tollgate.SinglePlan(plan))
	return l, ev
}

type response struct {
	status int
	header http.Header
	body   string
}

func get(t *testing.T, url string, header ...string) response {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, resp.Header, string(body)}
}

// TestErrorHandler checks that a denial reaches the application's error
// handler as an *Error, with the rate-limit headers already set, and that
// Echo's two error handlers render it.
func TestErrorHandler(t *testing.T) {
	t.Run("Custom", func(t *testing.T) {
		l, _ := newLimiter(t, 1)
		e := echo.New()
		var seen error
		e.HTTPErrorHandler = func(c *echo.Context, err error) {
			seen = err
			var te *tollgateechov5.Error
			if !errors.As(err, &te) {
				c.String(http.StatusInternalServerError, "not a tollgate error")
				return
			}
			c.String(echo.StatusCode(err), "app says: "+te.Body.Error)
		}
		e.GET("/hello", ok, tollgateechov5.Middleware(l))
		base := serve(t, e)
		get(t, base+"/hello", "X-Tenant-ID", "acme")
		r := get(t, base+"/hello", "X-Tenant-ID", "acme")
		if r.status != http.StatusTooManyRequests || r.body != "app says: rate_limited" {
			t.Fatalf("status %d body %q, want the app's own 429", r.status, r.body)
		}
		if r.header.Get("Retry-After") != "60" || r.header.Get("X-RateLimit-Remaining") != "0" {
			t.Errorf("headers %v: want Retry-After 60 and X-RateLimit-Remaining 0 set before the error handler ran", r.header)
		}
		var te *tollgateechov5.Error
		if !errors.As(seen, &te) || te.Code != http.StatusTooManyRequests || te.Body.RetryAfter != 60 || te.Body.Policy != "test" {
			t.Errorf("error handler got %#v", seen)
		}
		r = get(t, base+"/hello")
		if r.status != http.StatusUnauthorized || r.body != "app says: missing_tenant" {
			t.Errorf("no tenant: status %d body %q, want the app's own 401", r.status, r.body)
		}
	})

	t.Run("Default", func(t *testing.T) {
		l, _ := newLimiter(t, 1)
		e := echo.New()
		e.HTTPErrorHandler = echo.DefaultHTTPErrorHandler(true) // exposes errors: still not ours
		e.GET("/hello", ok, tollgateechov5.Middleware(l))
		base := serve(t, e)
		get(t, base+"/hello", "X-Tenant-ID", "acme")
		r := get(t, base+"/hello", "X-Tenant-ID", "acme")
		var body adapterkit.Body
		if err := json.Unmarshal([]byte(r.body), &body); err != nil || r.status != http.StatusTooManyRequests {
			t.Fatalf("status %d body %q: %v", r.status, r.body, err)
		}
		want := adapterkit.Body{Error: adapterkit.CodeRateLimited, Message: "rate limit exceeded (test): retry in 60s", RetryAfter: 60, Policy: "test",
			Type: adapterkit.ProblemQuotaExceeded, Title: adapterkit.TitleQuotaExceeded, Status: http.StatusTooManyRequests, Violated: "test"}
		if body != want {
			t.Errorf("body %+v, want %+v", body, want)
		}
		if got := r.header.Get("Content-Type"); got != adapterkit.ProblemContentType {
			t.Errorf("Content-Type = %q, want %s", got, adapterkit.ProblemContentType)
		}
		if got := r.header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("X-Content-Type-Options = %q, want nosniff", got)
		}
	})

	t.Run("ProblemDetails", func(t *testing.T) {
		l, _ := newLimiter(t, 1)
		e := echo.New()
		e.HTTPErrorHandler = echo.ProblemDetailsHTTPErrorHandler(false)
		e.GET("/hello", ok, tollgateechov5.Middleware(l))
		base := serve(t, e)
		get(t, base+"/hello", "X-Tenant-ID", "acme")
		r := get(t, base+"/hello", "X-Tenant-ID", "acme")
		if r.status != http.StatusTooManyRequests || !strings.HasPrefix(r.header.Get("Content-Type"), "application/problem+json") {
			t.Fatalf("status %d Content-Type %q, want 429 application/problem+json", r.status, r.header.Get("Content-Type"))
		}
		var problem map[string]any
		if err := json.Unmarshal([]byte(r.body), &problem); err != nil {
			t.Fatal(err)
		}
		if problem["status"] != float64(429) || problem["detail"] != "rate limit exceeded (test): retry in 60s" ||
			problem["type"] != adapterkit.ProblemQuotaExceeded || problem["title"] != adapterkit.TitleQuotaExceeded {
			t.Errorf("problem %v", problem)
		}
		if r.header.Get("Retry-After") != "60" {
			t.Errorf("Retry-After = %q, want 60", r.header.Get("Retry-After"))
		}
	})
}

// TestMisconfigured covers what the kit's NilLimiter case does not: the
// error of ToMiddleware, and the cause kept in the *Error for the logs.
func TestMisconfigured(t *testing.T) {
	if _, err := (tollgateechov5.Config{}).ToMiddleware(); !errors.Is(err, adapterkit.ErrNoLimiter) {
		t.Errorf("ToMiddleware without a Limiter: %v, want ErrNoLimiter", err)
	}
	l, _ := newLimiter(t, 1)
	for _, budget := range []string{"no spaces", "reprots"} {
		if _, err := (tollgateechov5.Config{Limiter: l, Budget: budget}).ToMiddleware(); err == nil || !strings.Contains(err.Error(), "Budget") {
			t.Errorf("ToMiddleware with the budget %q: %v, want an error naming Budget", budget, err)
		}
	}

	logged := adaptertest.CaptureDefaultLog(t)
	mw := tollgateechov5.Middleware(nil)
	if n := logged.Count("misconfigured"); n != 1 || !strings.Contains(logged.String(), "Limiter is nil") {
		t.Fatalf("at build, logged %d lines, want one naming the nil Limiter:\n%s", n, logged)
	}
	e := echo.New()
	e.HTTPErrorHandler = echo.DefaultHTTPErrorHandler(true)
	var seen error
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			seen = next(c)
			return seen
		}
	})
	e.GET("/hello", ok, mw)
	base := serve(t, e)
	for range 3 {
		r := get(t, base+"/hello", "X-Tenant-ID", "acme")
		if r.status != http.StatusInternalServerError || !strings.Contains(r.body, adapterkit.CodeInternalError) || strings.Contains(r.body, "nil") {
			t.Fatalf("status %d body %q, want 500 with %q and no internal text", r.status, r.body, adapterkit.CodeInternalError)
		}
	}
	if !errors.Is(seen, adapterkit.ErrNoLimiter) {
		t.Errorf("the error returned is %v, want one that wraps ErrNoLimiter for the logs", seen)
	}
	if n := logged.Count("misconfigured"); n != 1 {
		t.Errorf("logged %d lines after 3 requests, want the one at build", n)
	}
}

// TestClientIP runs the kit's client-address cases on an Echo whose
// IPExtractor believes X-Forwarded-For from loopback peers; the adapter
// believes it only from the proxies it is given.
func TestClientIP(t *testing.T) {
	adaptertest.RunClientIP(t, func(t *testing.T, l *tollgate.Limiter, trusted []netip.Prefix) string {
		e := echo.New()
		e.IPExtractor = echo.ExtractIPFromXFFHeader()
		e.GET("/ip", ok, tollgateechov5.MiddlewareWithConfig(tollgateechov5.Config{
			Limiter: l,
			Tenant:  tollgateechov5.TenantFromClientIP(trusted...),
		}))
		return serve(t, e)
	})
}

func TestMissingTenantHandler(t *testing.T) {
	l, _ := newLimiter(t, 1)
	e := echo.New()
	e.GET("/hello", ok, tollgateechov5.MiddlewareWithConfig(tollgateechov5.Config{
		Limiter: l,
		// Anonymous requests go unlimited.
		MissingTenantHandler: func(c *echo.Context, next echo.HandlerFunc) error { return next(c) },
	}))
	base := serve(t, e)
	for range 3 {
		if r := get(t, base+"/hello"); r.status != http.StatusOK || r.body != "ok" {
			t.Fatalf("anonymous request: status %d body %q, want 200 ok", r.status, r.body)
		}
	}
	adaptertest.Drain(t, 1, "GET", base+"/hello", "X-Tenant-ID", "acme")
}

func TestTenantFromHeader(t *testing.T) {
	l, ev := newLimiter(t, 1)
	e := echo.New()
	e.GET("/hello", ok, tollgateechov5.MiddlewareWithConfig(tollgateechov5.Config{
		Limiter: l,
		Tenant:  tollgateechov5.TenantFromHeader("x-api-tenant"), // any case
	}))
	base := serve(t, e)
	adaptertest.Drain(t, 1, "GET", base+"/hello", "X-Api-Tenant", "globex", "X-Tenant-ID", "acme")
	if got := ev.Last(t).Tenant; got != "globex" {
		t.Errorf("tenant %q, want globex", got)
	}
}
