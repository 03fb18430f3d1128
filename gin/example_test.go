package tollgategin_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/gin-gonic/gin"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/core/tollgatehttp"
	tollgategin "github.com/tollgate-go/tollgate/gin"
)

func ExampleNew() {
	// Every tenant gets a burst of 2 requests, refilled at 1 a second.
	plan := tollgate.Plan{Name: "free", Limit: tollgate.Limit{Rate: 1, Burst: 2}}
	l, err := tollgate.New(memory.New(), tollgate.SinglePlan(plan), tollgate.WithLogger(nil))
	if err != nil {
		panic(err)
	}

	r := gin.New()
	r.GET("/hello", tollgategin.New(l), func(c *gin.Context) {
		c.String(http.StatusOK, "hello\n")
	})

	var w *httptest.ResponseRecorder
	for range 3 {
		req := httptest.NewRequest("GET", "/hello", nil)
		req.Header.Set("X-Tenant-ID", "acme")
		w = httptest.NewRecorder()
		r.ServeHTTP(w, req)
		fmt.Println(w.Code, w.Header().Get("RateLimit"))
	}
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
// application's authentication middleware puts in the gin context. Report
// exports cost 10 tokens and also draw from a budget of their own.
func ExampleWithBudget() {
	team := tollgate.Plan{Name: "team", Limit: tollgate.Limit{Rate: 2, Burst: 100},
		Policies: []tollgate.Policy{
			// 50 report tokens an hour: five reports.
			{Budget: "reports", Limit: tollgate.Limit{Rate: 50.0 / 3600, Burst: 50}},
		}}
	l, err := tollgate.New(memory.New(), tollgate.SinglePlan(team), tollgate.WithLogger(nil))
	if err != nil {
		panic(err)
	}
	byTenant := tollgategin.WithTenant(tollgategin.TenantFromContext("tenant"))

	r := gin.New()
	api := r.Group("/api", func(c *gin.Context) {
		// Stands in for real authentication.
		if c.GetHeader("Authorization") == "Bearer secret-of-acme" {
			c.Set("tenant", "acme")
		}
	})
	api.GET("/hello", tollgategin.New(l, byTenant), func(c *gin.Context) { c.String(http.StatusOK, "hello") })
	api.POST("/reports", tollgategin.New(l, byTenant, tollgategin.WithCost(10), tollgategin.WithBudget("reports")),
		func(c *gin.Context) { c.String(http.StatusAccepted, "queued") })

	send := func(method, path string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, nil)
		req.Header.Set("Authorization", "Bearer secret-of-acme")
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		return w
	}
	for range 5 {
		send("POST", "/api/reports")
	}
	w := send("POST", "/api/reports")
	fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"))
	fmt.Println(w.Body.String())
	w = send("GET", "/api/hello")
	fmt.Println(w.Code, w.Header().Get("RateLimit"))

	w = httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest("GET", "/api/hello", nil))
	fmt.Println(w.Code, w.Body.String())
	// Output:
	// 429 "team";q=100;w=50, "team-reports";q=50;w=3600
	// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"rate limit exceeded (team-reports): retry in 720s","violated-policies":["team-reports"],"error":"rate_limited","message":"rate limit exceeded (team-reports): retry in 720s","retry_after":720,"policy":"team-reports"}
	// 200 "team";r=49;t=1
	// 401 {"type":"about:blank","title":"Unauthorized","status":401,"detail":"no tenant: authenticate first","error":"missing_tenant","message":"no tenant: authenticate first"}
}

// Anonymous clients are keyed by address. X-Forwarded-For is believed only
// from the proxies named here, whatever the engine's own settings say: a
// default gin engine would believe it from anyone.
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
	r := gin.New()
	r.Use(tollgategin.New(l, tollgategin.WithTenant(tollgategin.TenantFromClientIP(proxies...))))
	r.GET("/hello", func(c *gin.Context) { c.String(http.StatusOK, "hello") })

	// Twice through the load balancer, then from a client that claims
	// the same address: it gets a bucket of its own.
	for _, peer := range []string{"10.0.0.7:5000", "10.0.0.8:5000", "198.51.100.2:5000"} {
		req := httptest.NewRequest("GET", "/hello", nil)
		req.RemoteAddr = peer
		req.Header.Set("X-Forwarded-For", "203.0.113.9")
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		fmt.Println(peer, w.Code, w.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// 10.0.0.7:5000 200 19
	// 10.0.0.8:5000 200 18
	// 198.51.100.2:5000 200 19
}
