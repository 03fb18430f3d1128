package tollgateecho_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"

	"github.com/labstack/echo/v4"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	tollgateecho "github.com/tollgate-go/tollgate/echo"
)

func ExampleMiddleware() {
	// Every tenant gets a burst of 2 requests, refilled at 1 a second.
	plan := tollgate.Plan{Name: "free", Limit: tollgate.PerSecond(1, 2)}
	l, err := tollgate.New(memory.New(), tollgate.SinglePlan(plan), tollgate.WithLogger(nil))
	if err != nil {
		panic(err)
	}

	e := echo.New()
	e.GET("/hello", func(c echo.Context) error {
		return c.String(http.StatusOK, "hello")
	}, tollgateecho.Middleware(l))

	var w *httptest.ResponseRecorder
	for range 3 {
		req := httptest.NewRequest("GET", "/hello", nil)
		req.Header.Set("X-Tenant-ID", "acme")
		w = httptest.NewRecorder()
		e.ServeHTTP(w, req)
		fmt.Println(w.Code, w.Header().Get("RateLimit"))
	}
	// Echo's error handler rendered the denial.
	fmt.Println("Retry-After:", w.Header().Get("Retry-After"))
	fmt.Print(w.Body.String())
	// Output:
	// 200 "free";r=1;t=1
	// 200 "free";r=0;t=2
	// 429 "free";r=0;t=2
	// Retry-After: 1
	// {"error":"rate_limited","message":"rate limit exceeded: retry in 1s","retry_after":1}
}

// The tenant usually comes from the authenticated principal, which the
// application's authentication middleware puts in the Echo context; routes
// that cost more get a middleware of their own.
func ExampleMiddlewareWithConfig() {
	l, err := tollgate.New(memory.New(), tollgate.SinglePlan(tollgate.Free), tollgate.WithLogger(nil))
	if err != nil {
		panic(err)
	}
	cfg := tollgateecho.Config{
		Limiter: l,
		Tenant:  tollgateecho.TenantFromContext("tenant"),
		Skipper: func(c echo.Context) bool { return c.Path() == "/api/status" },
	}
	reports := cfg
	reports.Cost = 10

	e := echo.New()
	api := e.Group("/api", func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			// Stands in for real authentication.
			if c.Request().Header.Get("Authorization") == "Bearer secret-of-acme" {
				c.Set("tenant", "acme")
			}
			return next(c)
		}
	})
	api.GET("/hello", func(c echo.Context) error { return c.String(http.StatusOK, "hello") },
		tollgateecho.MiddlewareWithConfig(cfg))
	api.POST("/reports", func(c echo.Context) error { return c.String(http.StatusCreated, "created") },
		tollgateecho.MiddlewareWithConfig(reports))

	for _, r := range []struct{ method, path string }{{"GET", "/api/hello"}, {"POST", "/api/reports"}} {
		req := httptest.NewRequest(r.method, r.path, nil)
		req.Header.Set("Authorization", "Bearer secret-of-acme")
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		fmt.Println(r.method, r.path, w.Code, w.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// GET /api/hello 200 19
	// POST /api/reports 201 9
}

// ToMiddleware reports a configuration mistake at start-up.
func ExampleConfig_ToMiddleware() {
	_, err := tollgateecho.Config{}.ToMiddleware()
	fmt.Println(err)
	// Output:
	// tollgateecho: Config.Limiter is nil
}

// Behind a load balancer, tell Echo which proxies to believe before keying
// by client address.
func ExampleTenantFromClientIP() {
	l, err := tollgate.New(memory.New(), tollgate.SinglePlan(tollgate.Free), tollgate.WithLogger(nil))
	if err != nil {
		panic(err)
	}
	e := echo.New()
	_, lb, _ := net.ParseCIDR("10.0.0.0/8")
	e.IPExtractor = echo.ExtractIPFromXFFHeader(echo.TrustIPRange(lb))
	e.Use(tollgateecho.MiddlewareWithConfig(tollgateecho.Config{Limiter: l, Tenant: tollgateecho.TenantFromClientIP()}))
	e.GET("/hello", func(c echo.Context) error { return c.String(http.StatusOK, "hello") })

	req := httptest.NewRequest("GET", "/hello", nil)
	req.RemoteAddr = "10.0.0.7:5000" // the load balancer
	req.Header.Set("X-Forwarded-For", "203.0.113.9")
	w := httptest.NewRecorder()
	e.ServeHTTP(w, req)
	fmt.Println(w.Code, w.Header().Get("X-RateLimit-Remaining"))
	// Output:
	// 200 19
}
