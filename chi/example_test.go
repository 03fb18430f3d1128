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
)

func ExampleMiddleware() {
	// Two requests, then one a minute, for every tenant.
	plan := tollgate.Plan{Name: "free", Limit: tollgate.PerMinute(1, 2)}
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
	// 200 "free";r=0;t=120 []
	// 429 "free";r=0;t=120 [60]
}

// A report costs 10 tokens, other API routes 1; the tenant is the one the
// application's authentication middleware put in the request context.
func ExampleMiddleware_perRouteCost() {
	type tenantKey struct{}
	authenticate := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// A real application checks a credential here.
			ctx := context.WithValue(r.Context(), tenantKey{}, "acme")
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
	l, err := tollgate.New(memory.New(), tollgate.SinglePlan(tollgate.Growth), tollgate.WithLogger(nil))
	if err != nil {
		log.Fatal(err)
	}
	byTenant := tollgate.WithTenant(tollgate.TenantFromContext(tenantKey{}))

	r := chi.NewRouter()
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {}) // not limited
	r.Route("/api", func(r chi.Router) {
		r.Use(authenticate)
		r.With(tollgatechi.Middleware(l, byTenant)).Get("/hello", func(w http.ResponseWriter, _ *http.Request) {})
		r.With(tollgatechi.Middleware(l, byTenant, tollgate.WithCost(10))).Post("/reports", func(w http.ResponseWriter, _ *http.Request) {})
	})

	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest("POST", "/api/reports", nil))
	fmt.Println(w.Code, w.Header().Get("X-RateLimit-Remaining"))
	// Output:
	// 200 490
}

// Anonymous clients are limited by address; X-Forwarded-For is believed only
// from the load balancers' network.
func ExampleMiddleware_clientIP() {
	proxies, err := tollgate.ParsePrefixes("10.0.0.0/8")
	if err != nil {
		log.Fatal(err)
	}
	l, err := tollgate.New(memory.New(), tollgate.SinglePlan(tollgate.Free), tollgate.WithLogger(nil))
	if err != nil {
		log.Fatal(err)
	}
	r := chi.NewRouter()
	r.Use(tollgatechi.Middleware(l, tollgate.WithTenant(tollgate.TenantFromClientIP(proxies...))))
	r.Get("/", func(w http.ResponseWriter, _ *http.Request) {})
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
