package tollgate_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adaptertest"
)

func ok(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) }

func TestMiddlewareConformance(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T, s adaptertest.Setup) string {
		limit := tollgate.Middleware(s.Limiter, tollgate.WithSkip(func(r *http.Request) bool {
			return r.URL.Path == "/skipped"
		}))
		costly := tollgate.Middleware(s.Limiter, tollgate.WithCost(5))
		custom := tollgate.Middleware(s.Limiter, tollgate.WithDenyHandler(
			func(w http.ResponseWriter, r *http.Request, d tollgate.Decision) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusTeapot)
				w.Write([]byte(`{"denied":"` + d.Tenant + `"}`))
			}))
		mux := http.NewServeMux()
		mux.Handle("GET /limited", limit(http.HandlerFunc(ok)))
		mux.Handle("GET /skipped", limit(http.HandlerFunc(ok)))
		mux.Handle("GET /costly", costly(http.HandlerFunc(ok)))
		mux.Handle("GET /custom", custom(http.HandlerFunc(ok)))
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		return srv.URL
	})
}

func TestMiddlewareWithoutLimiterAnswers500(t *testing.T) {
	h := tollgate.Middleware(nil)(http.HandlerFunc(ok))
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("X-Tenant-ID", "t")
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusInternalServerError || rec.Body.String() == "ok" {
		t.Fatalf("nil Limiter: %d %q, want 500 and no handler", rec.Code, rec.Body.String())
	}
}

func TestMiddlewareNamesTheRouteOnlyForEvents(t *testing.T) {
	var routes []string
	calls := 0
	l, err := tollgate.New(newMemory(t), tollgate.SinglePlan(tollgate.Plan{Name: "p", Limit: tollgate.Limit{Rate: 1, Burst: 2}}),
		tollgate.WithLogger(nil),
		tollgate.WithOnThrottle(func(_ context.Context, e tollgate.ThrottleEvent) { routes = append(routes, e.Route) }))
	if err != nil {
		t.Fatal(err)
	}
	mw := tollgate.Middleware(l, tollgate.WithRoute(func(r *http.Request) string { calls++; return "/items/{id}" }))
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
