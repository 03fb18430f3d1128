package tollgateecho_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/labstack/echo/v4"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/core/tollgatehttp"
	tollgateecho "github.com/tollgate-go/tollgate/echo"
)

func ExampleMiddleware() {
	// Every tenant gets a burst of 2 requests, refilled at 1 a second.
	plan := tollgate.Plan{Name: "free", Limit: tollgate.Limit{Rate: 1, Burst: 2}}
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
	// 200 "free";r=0;t=1
	// 429 "free";r=0;t=1
	// Retry-After: 1
	// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"rate limit exceeded (free): retry in 1s","violated-policies":["free"],"error":"rate_limited","message":"rate limit exceeded (free): retry in 1s","retry_after":1,"policy":"free"}
}

// The tenant usually comes from the authenticated principal, which the
// application's authentication middleware puts in the Echo context. Report
// exports get a middleware of their own: they cost 10 tokens and also draw
// from a budget of their own, 50 tokens an hour.
func ExampleMiddlewareWithConfig() {
	team := tollgate.Plan{Name: "team", Limit: tollgate.Limit{Rate: 2, Burst: 100},
		Policies: []tollgate.Policy{{Budget: "reports", Limit: tollgate.Limit{Rate: 50.0 / 3600, Burst: 50}}}}
	l, err := tollgate.New(memory.New(), tollgate.SinglePlan(team), tollgate.WithLogger(nil))
	if err != nil {
		panic(err)
	}
	cfg := tollgateecho.Config{
		Limiter: l,
		Tenant:  tollgateecho.TenantFromContext("tenant"),
		Skipper: func(c echo.Context) bool { return c.Path() == "/api/status" },
	}
	reports := cfg
	reports.Cost, reports.Budget = 10, "reports"

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
	api.POST("/reports", func(c echo.Context) error { return c.String(http.StatusAccepted, "queued") },
		tollgateecho.MiddlewareWithConfig(reports))

	for _, r := range []struct{ method, path string }{{"GET", "/api/hello"}, {"POST", "/api/reports"}} {
		req := httptest.NewRequest(r.method, r.path, nil)
		req.Header.Set("Authorization", "Bearer secret-of-acme")
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		fmt.Println(r.method, r.path, w.Code, w.Header().Get("RateLimit"))
	}
	// Output:
	// GET /api/hello 200 "team";r=99;t=1
	// POST /api/reports 202 "team";r=89;t=1, "team-reports";r=40;t=72
}

// ToMiddleware reports a configuration mistake at start-up.
func ExampleConfig_ToMiddleware() {
	_, err := tollgateecho.Config{}.ToMiddleware()
	fmt.Println(err)
	// Output:
	// tollgate middleware: the Limiter is nil
}

// Anonymous clients are keyed by address. X-Forwarded-For is believed only
// from the proxies named here, whatever the Echo instance's IPExtractor
// says.
func ExampleTenantFromClientIP() {
	proxies, err := tollgatehttp.ParsePrefixes("10.0.0.0/8")
	if err != nil {
		panic(err)
	}
	free := tollgate.DefaultPlans()[0]
	l, err := tollgate.New(memory.New(), tollgate.SinglePlan(free), tollgate.WithLogger(nil))
	if err != nil {
		panic(err)
	}
	e := echo.New()
	e.Use(tollgateecho.MiddlewareWithConfig(tollgateecho.Config{Limiter: l, Tenant: tollgateecho.TenantFromClientIP(proxies...)}))
	e.GET("/hello", func(c echo.Context) error { return c.String(http.StatusOK, "hello") })

	// Twice through the load balancer, then from a client that claims
	// the same address: it gets a bucket of its own.
	for _, peer := range []string{"10.0.0.7:5000", "10.0.0.8:5000", "198.51.100.2:5000"} {
		req := httptest.NewRequest("GET", "/hello", nil)
		req.RemoteAddr = peer
		req.Header.Set("X-Forwarded-For", "203.0.113.9")
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		fmt.Println(peer, w.Code, w.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// 10.0.0.7:5000 200 19
	// 10.0.0.8:5000 200 18
	// 198.51.100.2:5000 200 19
}
