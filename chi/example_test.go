package tollgatechi_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/go-chi/chi/v5"

	tollgatechi "github.com/tollgate-go/tollgate/chi"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/core/tollgatehttp"
)

func ExampleMiddleware() {
	// Two requests, then one a minute, for every tenant.
	plan := tollgate.Plan{Name: "free", Limit: tollgate.Limit{Rate: 1.0 / 60, Burst: 2}}
	l, err := tollgate.New(memory.New(), tollgate.SinglePlan(plan), tollgate.WithLogger(nil))
	if err != nil {
		log.Fatal(err)
	}

	r := chi.NewRouter()
	r.Use(tollgatechi.Middleware(l))
	r.Get("/api/hello", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("hello")) })

	for range 3 {
		req := httptest.NewRequest("GET", "/api/hello", nil)
		req.Header.Set("X-Tenant-ID", "acme")
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		fmt.Println(w.Code, w.Header().Get("RateLimit"), w.Header().Values("Retry-After"))
	}
	// Output:
	// 200 "free";r=1;t=60 []
	// 200 "free";r=0;t=60 []
	// 429 "free";r=0;t=60 [60]
}

// Report exports cost 10 tokens and also draw from a budget of their own,
// 50 tokens an hour; other API routes cost 1. The tenant is the one the
// application's authentication middleware put in the request context.
func ExampleMiddleware_budget() {
	type tenantKey struct{}
	authenticate := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// A real application checks a credential here.
			ctx := context.WithValue(r.Context(), tenantKey{}, "acme")
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
	team := tollgate.Plan{Name: "team", Limit: tollgate.Limit{Rate: 2, Burst: 100},
		Policies: []tollgate.Policy{{Budget: "reports", Limit: tollgate.Limit{Rate: 50.0 / 3600, Burst: 50}}}}
	l, err := tollgate.New(memory.New(), tollgate.SinglePlan(team), tollgate.WithLogger(nil))
	if err != nil {
		log.Fatal(err)
	}
	byTenant := tollgatehttp.WithTenant(tollgatehttp.TenantFromContext(tenantKey{}))

	r := chi.NewRouter()
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {}) // not limited
	r.Route("/api", func(r chi.Router) {
		r.Use(authenticate)
		r.With(tollgatechi.Middleware(l, byTenant)).Get("/hello", func(w http.ResponseWriter, _ *http.Request) {})
		r.With(tollgatechi.Middleware(l, byTenant, tollgatehttp.WithCost(10), tollgatehttp.WithBudget("reports"))).
			Post("/reports", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) })
	})

	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest("POST", "/api/reports", nil))
	fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"))
	fmt.Println(w.Header().Get("RateLimit"))
	// Output:
	// 202 "team";q=100;w=50, "team-reports";q=50;w=3600
	// "team";r=90;t=1, "team-reports";r=40;t=72
}

// Anonymous clients are keyed by address; X-Forwarded-For is believed only
// from the load balancers' network. Do not combine it with chi's
// middleware.RealIP, which believes the header from anyone.
func ExampleMiddleware_clientIP() {
	proxies, err := tollgatehttp.ParsePrefixes("10.0.0.0/8")
	if err != nil {
		log.Fatal(err)
	}
	free := tollgate.DefaultPlans()[0]
	l, err := tollgate.New(memory.New(), tollgate.SinglePlan(free), tollgate.WithLogger(nil))
	if err != nil {
		log.Fatal(err)
	}
	r := chi.NewRouter()
	r.Use(tollgatechi.Middleware(l, tollgatehttp.WithTenant(tollgatehttp.TenantFromClientIP(proxies...))))
	r.Get("/", func(w http.ResponseWriter, _ *http.Request) {})

	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "10.0.0.7:5000" // the load balancer
	req.Header.Set("X-Forwarded-For", "203.0.113.9")
	w := httptest.NewRecorder()
	r.ServeHTTP(w, req)
	fmt.Println(w.Code, w.Header().Get("X-RateLimit-Remaining"))
	// Output:
	// 200 19
}

func ExampleRoutePattern() {
	r := chi.NewRouter()
	r.Use(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			// Before chi has routed the request.
			fmt.Println(tollgatechi.RoutePattern(req))
			next.ServeHTTP(w, req)
		})
	})
	r.Route("/api", func(r chi.Router) {
		r.Get("/users/{id}", func(http.ResponseWriter, *http.Request) {})
	})
	r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/api/users/42", nil))
	// Output:
	// /api/users/{id}
}
