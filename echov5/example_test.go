package tollgateechov5_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"

	"github.com/labstack/echo/v5"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	tollgateechov5 "github.com/tollgate-go/tollgate/echov5"
)

func ExampleMiddleware() {
	// Every tenant gets a burst of 2 requests, refilled at 1 a second.
	plan := tollgate.Plan{Name: "free", Limit: tollgate.Limit{Rate: 1, Burst: 2}}
	l, err := tollgate.New(memory.New(), tollgate.SinglePlan(plan), tollgate.WithLogger(nil))
	if err != nil {
		panic(err)
	}
	e := echo.New()
	e.GET("/hello", func(c *echo.Context) error {
		return c.String(http.StatusOK, "hello")
	}, tollgateechov5.Middleware(l))

	var w *httptest.ResponseRecorder
	for range 3 {
		req := httptest.NewRequest("GET", "/hello", nil)
		req.Header.Set("X-Tenant-ID", "acme")
		w = httptest.NewRecorder()
		e.ServeHTTP(w, req)
		fmt.Println(w.Code, w.Header().Get("RateLimit"))
	}
	// Echo's default error handler rendered the denial.
	fmt.Println("Retry-After:", w.Header().Get("Retry-After"))
	fmt.Print(w.Body.String())
	// Output:
	// 200 "free";r=1;t=1
	// 200 "free";r=0;t=1
	// 429 "free";r=0;t=1
	// Retry-After: 1
	// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"rate limit exceeded (free): retry in 1s","violated-policies":["free"],"error":"rate_limited","message":"rate limit exceeded (free): retry in 1s","retry_after":1,"policy":"free"}
}

// The tenant usually comes from the authenticated principal, which the
// application's authentication middleware puts in the Echo context; routes
// that cost more get a middleware of their own.
func ExampleMiddlewareWithConfig() {
	l, err := tollgate.New(memory.New(), tollgate.SinglePlan(tollgate.Plan{Name: "free", Limit: tollgate.Limit{Rate: 2, Burst: 20}}), tollgate.WithLogger(nil))
	if err != nil {
		panic(err)
	}
	cfg := tollgateechov5.Config{
		Limiter: l,
		Tenant:  tollgateechov5.TenantFromContext("tenant"),
	}
	reports := cfg
	reports.Cost = 10

	e := echo.New()
	api := e.Group("/api", func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			// Stands in for real authentication.
			if c.Request().Header.Get("Authorization") == "Bearer secret-of-acme" {
				c.Set("tenant", "acme")
			}
			return next(c)
		}
	})
	api.GET("/hello", func(c *echo.Context) error { return c.String(http.StatusOK, "hello") },
		tollgateechov5.MiddlewareWithConfig(cfg))
	api.POST("/reports", func(c *echo.Context) error { return c.String(http.StatusCreated, "created") },
		tollgateechov5.MiddlewareWithConfig(reports))

	for _, r := range []struct{ method, path, auth string }{
		{"GET", "/api/hello", "Bearer secret-of-acme"},
		{"POST", "/api/reports", "Bearer secret-of-acme"},
		{"GET", "/api/hello", ""},
	} {
		req := httptest.NewRequest(r.method, r.path, nil)
		if r.auth != "" {
			req.Header.Set("Authorization", r.auth)
		}
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		fmt.Println(r.method, r.path, w.Code, w.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// GET /api/hello 200 19
	// POST /api/reports 201 9
	// GET /api/hello 401
}

// ToMiddleware reports a configuration mistake at start-up.
func ExampleConfig_ToMiddleware() {
	_, err := tollgateechov5.Config{}.ToMiddleware()
	fmt.Println(err)
	// Output:
	// tollgate middleware: the Limiter is nil
}

// An application's own error handler finds the middleware's answer with
// errors.As and renders it in the application's format; the rate-limit
// headers are already on the response.
func ExampleError() {
	l, err := tollgate.New(memory.New(), tollgate.SinglePlan(tollgate.Plan{Name: "free", Limit: tollgate.Limit{Rate: 1, Burst: 1}}), tollgate.WithLogger(nil))
	if err != nil {
		panic(err)
	}
	e := echo.New()
	e.HTTPErrorHandler = func(c *echo.Context, err error) {
		var te *tollgateechov5.Error
		if errors.As(err, &te) {
			c.JSON(te.Code, map[string]any{"code": te.Body.Error, "wait_seconds": te.Body.RetryAfter})
			return
		}
		echo.DefaultHTTPErrorHandler(false)(c, err)
	}
	e.Use(tollgateechov5.Middleware(l))
	e.GET("/hello", func(c *echo.Context) error { return c.String(http.StatusOK, "hello") })

	for range 2 {
		req := httptest.NewRequest("GET", "/hello", nil)
		req.Header.Set("X-Tenant-ID", "acme")
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		fmt.Print(w.Code, " ", w.Body.String())
		fmt.Println()
	}
	// Output:
	// 200 hello
	// 429 {"code":"rate_limited","wait_seconds":1}
}

// Behind a load balancer, name it as a trusted proxy: only then is the
// client address read from X-Forwarded-For.
func ExampleTenantFromClientIP() {
	l, err := tollgate.New(memory.New(), tollgate.SinglePlan(tollgate.Plan{Name: "anonymous", Limit: tollgate.Limit{Rate: 1, Burst: 5}}), tollgate.WithLogger(nil))
	if err != nil {
		panic(err)
	}
	e := echo.New()
	e.Use(tollgateechov5.MiddlewareWithConfig(tollgateechov5.Config{
		Limiter: l,
		Tenant:  tollgateechov5.TenantFromClientIP(netip.MustParsePrefix("10.0.0.0/8")),
	}))
	e.GET("/hello", func(c *echo.Context) error { return c.String(http.StatusOK, "hello") })

	for _, r := range []struct{ peer, forwardedFor string }{
		{"10.0.0.7:5000", "198.51.100.7"},  // through the load balancer
		{"10.0.0.7:5000", "198.51.100.7"},  // again: the same client's bucket
		{"198.51.100.7:6000", "192.0.2.1"}, // directly, with a forged header: still that client
	} {
		req := httptest.NewRequest("GET", "/hello", nil)
		req.RemoteAddr = r.peer
		req.Header.Set("X-Forwarded-For", r.forwardedFor)
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		fmt.Println(r.peer, r.forwardedFor, w.Code, w.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// 10.0.0.7:5000 198.51.100.7 200 4
	// 10.0.0.7:5000 198.51.100.7 200 3
	// 198.51.100.7:6000 192.0.2.1 200 2
}
