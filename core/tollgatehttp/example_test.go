package tollgatehttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/core/tollgatehttp"
)

func ExampleMiddleware() {
	// Every tenant gets a burst of 2 requests, refilled at 1 a second.
	plan := tollgate.Plan{Name: "free", Limit: tollgate.Limit{Rate: 1, Burst: 2}}
	l, err := tollgate.New(memory.New(), tollgate.SinglePlan(plan), tollgate.WithLogger(nil))
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "hello") })
	h := tollgatehttp.Middleware(l)(mux)

	var w *httptest.ResponseRecorder
	for range 3 {
		req := httptest.NewRequest("GET", "/hello", nil)
		req.Header.Set("X-Tenant-ID", "acme")
		w = httptest.NewRecorder()
		h.ServeHTTP(w, req)
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

// A plan may cap the requests of a tenant that run at once: a request holds
// a slot until its handler returns, and one over the cap gets 429 at once.
func ExampleMiddleware_inFlight() {
	plan := tollgate.Plan{Name: "free", Limit: tollgate.Limit{Rate: 100, Burst: 100},
		Policies: []tollgate.Policy{{InFlight: 1}}}
	l, err := tollgate.New(memory.New(), tollgate.SinglePlan(plan), tollgate.WithLogger(nil))
	if err != nil {
		panic(err)
	}
	var h http.Handler
	h = tollgatehttp.Middleware(l)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/export" {
			// A second request while this one runs.
			inner := httptest.NewRecorder()
			other := httptest.NewRequest("GET", "/other", nil)
			other.Header.Set("X-Tenant-ID", "acme")
			h.ServeHTTP(inner, other)
			fmt.Println(inner.Code, inner.Header().Get("RateLimit-Policy"))
			fmt.Println("Retry-After:", inner.Header().Get("Retry-After"))
		}
	}))
	for _, path := range []string{"/export", "/other"} {
		req := httptest.NewRequest("GET", path, nil)
		req.Header.Set("X-Tenant-ID", "acme")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		fmt.Println(w.Code, w.Header().Get("RateLimit"))
	}
	// Output:
	// 429 "free";q=100;w=1, "free-inflight";q=1;qu="concurrent-requests"
	// Retry-After: 1
	// 200 "free";r=99;t=1, "free-inflight";r=0
	// 200 "free";r=98;t=1, "free-inflight";r=0
}

// Behind a load balancer, anonymous clients are keyed by their address, as
// the proxies the application trusts report it in X-Forwarded-For.
func ExampleTenantFromClientIP() {
	proxies, err := tollgatehttp.ParsePrefixes("10.0.0.0/8")
	if err != nil {
		panic(err)
	}
	tenant := tollgatehttp.TenantFromClientIP(proxies...)

	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "10.1.2.3:40000" // the load balancer
	req.Header.Set("X-Forwarded-For", "198.51.100.7, 10.4.5.6")
	fmt.Println(tenant(req))

	req.RemoteAddr = "203.0.113.9:40000" // a client that claims to be another
	fmt.Println(tenant(req))
	// Output:
	// 198.51.100.7
	// 203.0.113.9
}
