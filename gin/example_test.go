package tollgategin_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/gin-gonic/gin"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	tollgategin "github.com/tollgate-go/tollgate/gin"
)

func ExampleNew() {
	// Every tenant gets a burst of 2 requests, refilled at 1 a second.
	plan := tollgate.Plan{Name: "free", Limit: tollgate.PerSecond(1, 2)}
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
	fmt.Println(w.Body.String())
	// Output:
	// 200 "free";r=1;t=1
	// 200 "free";r=0;t=2
	// 429 "free";r=0;t=2
	// Retry-After: 1
	// {"error":"rate_limited","message":"rate limit exceeded: retry in 1s","retry_after":1}
}

// The tenant usually comes from the authenticated principal, which the
// application's authentication middleware puts in the gin context.
func ExampleTenantFromContext() {
	l, err := tollgate.New(memory.New(), tollgate.SinglePlan(tollgate.Free), tollgate.WithLogger(nil))
	if err != nil {
		panic(err)
	}

	r := gin.New()
	r.Use(func(c *gin.Context) {
		// Stands in for real authentication.
		if c.GetHeader("Authorization") == "Bearer secret-of-acme" {
			c.Set("tenant", "acme")
		}
	})
	api := r.Group("/api", tollgategin.New(l, tollgategin.WithTenant(tollgategin.TenantFromContext("tenant"))))
	api.GET("/hello", func(c *gin.Context) { c.String(http.StatusOK, "hello") })
	api.POST("/reports", tollgategin.New(l,
		tollgategin.WithTenant(tollgategin.TenantFromContext("tenant")),
		tollgategin.WithCost(10),
	), func(c *gin.Context) { c.String(http.StatusCreated, "created") })

	req := httptest.NewRequest("GET", "/api/hello", nil)
	req.Header.Set("Authorization", "Bearer secret-of-acme")
	w := httptest.NewRecorder()
	r.ServeHTTP(w, req)
	fmt.Println(w.Code, w.Header().Get("X-RateLimit-Remaining"))

	w = httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest("GET", "/api/hello", nil))
	fmt.Println(w.Code, w.Body.String())
	// Output:
	// 200 19
	// 401 {"error":"missing_tenant","message":"no tenant: authenticate first"}
}

// Behind a load balancer, tell gin which proxies to believe before keying
// by client address.
func ExampleTenantFromClientIP() {
	l, err := tollgate.New(memory.New(), tollgate.SinglePlan(tollgate.Free), tollgate.WithLogger(nil))
	if err != nil {
		panic(err)
	}
	r := gin.New()
	if err := r.SetTrustedProxies([]string{"10.0.0.0/8"}); err != nil {
		panic(err)
	}
	r.Use(tollgategin.New(l, tollgategin.WithTenant(tollgategin.TenantFromClientIP())))
	r.GET("/hello", func(c *gin.Context) { c.String(http.StatusOK, "hello") })

	req := httptest.NewRequest("GET", "/hello", nil)
	req.RemoteAddr = "10.0.0.7:5000" // the load balancer
	req.Header.Set("X-Forwarded-For", "203.0.113.9")
	w := httptest.NewRecorder()
	r.ServeHTTP(w, req)
	fmt.Println(w.Code, w.Header().Get("X-RateLimit-Remaining"))
	// Output:
	// 200 19
}
