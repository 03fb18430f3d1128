package tollgatehttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adaptertest"
	"github.com/tollgate-go/tollgate/core/tollgatehttp"
)

func ok(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) }

func TestMiddlewareConformance(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T, s adaptertest.Setup) string {
		byTenant := tollgatehttp.WithTenant(tollgatehttp.TenantFromContext(adaptertest.TenantKey{}))
		limit := tollgatehttp.Middleware(s.Limiter, byTenant, tollgatehttp.WithSkip(func(r *http.Request) bool {
			return r.URL.Path == "/skipped"
		}))
		costly := tollgatehttp.Middleware(s.Limiter, byTenant, tollgatehttp.WithCost(5))
		reports := tollgatehttp.Middleware(s.Limiter, byTenant, tollgatehttp.WithBudget(adaptertest.Budget))
		custom := tollgatehttp.Middleware(s.Limiter, byTenant, tollgatehttp.WithDenyHandler(
			func(w http.ResponseWriter, r *http.Request, d tollgate.Decision) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusTeapot)
				w.Write([]byte(`{"denied":"` + d.Tenant + `"}`))
			}))
		byHeader := tollgatehttp.Middleware(s.Limiter)
		held := tollgatehttp.Middleware(s.Limiter, byTenant, tollgatehttp.WithMaxDelay(adaptertest.HeldDelay, 0))
		mux := http.NewServeMux()
		mux.Handle("GET /limited", limit(http.HandlerFunc(ok)))
		mux.Handle("GET /skipped", limit(http.HandlerFunc(ok)))
		mux.Handle("GET /costly", costly(http.HandlerFunc(ok)))
		mux.Handle("GET /custom", custom(http.HandlerFunc(ok)))
		mux.Handle("GET /reports/{id}", reports(http.HandlerFunc(ok)))
		mux.Handle("GET /by-header", byHeader(http.HandlerFunc(ok)))
		mux.Handle("GET /held", held(http.HandlerFunc(ok)))
		srv := httptest.NewServer(adaptertest.Authenticate(mux, func(r *http.Request, tenant string) *http.Request {
			return r.WithContext(context.WithValue(r.Context(), adaptertest.TenantKey{}, tenant))
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	})
}

func TestMiddlewareClientIP(t *testing.T) {
	adaptertest.RunClientIP(t, func(t *testing.T, l *tollgate.Limiter, trusted []netip.Prefix) string {
		mux := http.NewServeMux()
		mux.Handle("GET /ip", tollgatehttp.Middleware(l, tollgatehttp.WithTenant(tollgatehttp.TenantFromClientIP(trusted...)))(http.HandlerFunc(ok)))
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		return srv.URL
	})
}

func TestMiddlewareNamesTheRouteOnlyForEvents(t *testing.T) {
	var routes []string
	calls := 0
	l, _, _ := adaptertest.NewLimiter(t, tollgate.SinglePlan(tollgate.Plan{Name: "p", Limit: tollgate.Limit{Rate: 1, Burst: 2}}),
		tollgate.WithOnThrottle(func(_ context.Context, e tollgate.ThrottleEvent) { routes = append(routes, e.Route) }))
	mw := tollgatehttp.Middleware(l, tollgatehttp.WithRoute(func(r *http.Request) string { calls++; return "/items/{id}" }))
	h := mw(http.HandlerFunc(ok))
	for i := 0; i < 3; i++ {
		req := httptest.NewRequest(http.MethodGet, "/items/42", nil)
		req.Header.Set("X-Tenant-ID", "t")
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	if calls != 1 || len(routes) != 1 || routes[0] != "/items/{id}" {
		t.Fatalf("route function called %d times, events %q; want once, for the one denial", calls, routes)
	}
}
