package tollgate_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
)

func Example() {
	plans, _ := tollgate.NewStaticResolver(tollgate.DefaultPlans(), "free", map[string]string{
		"acme": "enterprise",
	})
	store := memory.New()
	defer store.Close()
	limiter, err := tollgate.New(store, plans)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := 0; i < 21; i++ {
		d, _ := limiter.Take(ctx, tollgate.Request{Tenant: "initech"})
		if !d.Allowed {
			fmt.Printf("request %d denied on plan %s; retry in %ds\n", i+1, d.Plan.Name, tollgate.RetryAfterSeconds(d.RetryAfter))
		}
	}
	d, _ := limiter.Take(ctx, tollgate.Request{Tenant: "acme", Cost: 10})
	fmt.Printf("acme: allowed=%v, %d of %d tokens left\n", d.Allowed, d.Remaining, d.Plan.Limit.Burst)
	// Output:
	// request 21 denied on plan free; retry in 1s
	// acme: allowed=true, 1990 of 2000 tokens left
}

func ExampleMiddleware() {
	store := memory.New()
	defer store.Close()
	limiter, _ := tollgate.New(store, tollgate.SinglePlan(tollgate.Plan{
		Name: "basic", Limit: tollgate.Limit{Rate: 1, Burst: 2},
	}), tollgate.WithLogger(nil))

	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	mux := http.NewServeMux()
	mux.Handle("GET /api/hello", tollgate.Middleware(limiter)(hello))
	mux.Handle("POST /api/reports", tollgate.Middleware(limiter, tollgate.WithCost(2))(hello))

	for i := 0; i < 3; i++ {
		req := httptest.NewRequest("GET", "/api/hello", nil)
		req.Header.Set("X-Tenant-ID", "initech")
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		fmt.Printf("%d %s retry-after=%q\n", rec.Code, rec.Header().Get("RateLimit"), rec.Header().Get("Retry-After"))
	}
	// Output:
	// 200 "basic";r=1;t=1 retry-after=""
	// 200 "basic";r=0;t=2 retry-after=""
	// 429 "basic";r=0;t=2 retry-after="1"
}

func ExampleCachingResolver() {
	// lookupPlan stands in for a query of the application's database.
	lookupPlan := tollgate.PlanResolverFunc(func(ctx context.Context, tenant string) (tollgate.Plan, error) {
		if tenant == "globex" {
			return tollgate.Growth, nil
		}
		return tollgate.Free, nil
	})
	plans, err := tollgate.NewCachingResolver(lookupPlan, time.Minute)
	if err != nil {
		panic(err)
	}
	p, _ := plans.ResolvePlan(context.Background(), "globex")
	fmt.Println(p.Name, p.Limit)
	// When billing moves a tenant to another plan:
	plans.Invalidate("globex")
	// Output: growth 500 burst at 50/s
}

func ExampleDecision_WriteHeaders() {
	store := memory.New()
	defer store.Close()
	limiter, _ := tollgate.New(store, tollgate.SinglePlan(tollgate.Free),
		tollgate.WithClock(func() time.Time { return time.Unix(1_800_000_000, 0) }))
	d, _ := limiter.Take(context.Background(), tollgate.Request{Tenant: "t", Cost: 4})
	h := http.Header{}
	d.WriteHeaders(h)
	for _, k := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit"} {
		fmt.Printf("%s: %s\n", k, h.Get(k))
	}
	// Output:
	// X-RateLimit-Limit: 20
	// X-RateLimit-Remaining: 16
	// X-RateLimit-Reset: 1800000002
	// RateLimit-Policy: "free";q=20;w=10
	// RateLimit: "free";r=16;t=2
}
