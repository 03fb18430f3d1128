package tollgateechov5_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v5"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adaptertest"
	tollgateechov5 "github.com/tollgate-go/tollgate/echov5"
)

type headerWriter struct {
	header http.Header
	status int
}

func (w *headerWriter) Header() http.Header         { return w.header }
func (w *headerWriter) WriteHeader(status int)      { w.status = status }
func (w *headerWriter) Write(p []byte) (int, error) { return len(p), nil }

// TestAllocs keeps the adapter's own allocations on the allowed path to the
// one of its rate-limit headers: a request through Echo with the middleware
// may allocate what Echo and the Limiter's decision allocate, and one more.
func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	plan := tollgate.Plan{Name: "big", Limit: tollgate.Limit{Rate: 1e6, Burst: 1e9}}
	l, _, _ := adaptertest.NewLimiter(t, tollgate.SinglePlan(plan))
	engine := testing.AllocsPerRun(100, func() {
		var d tollgate.Decision
		l.Decide(context.Background(), &tollgate.Request{Tenant: "acme", Method: "GET", Route: "/x"}, &d)
	})
	serve := func(mw ...echo.MiddlewareFunc) float64 {
		e := echo.New()
		e.GET("/x", func(c *echo.Context) error { return c.NoContent(http.StatusOK) }, mw...)
		req := httptest.NewRequest("GET", "/x", nil)
		req.Header.Set("X-Tenant-ID", "acme")
		w := &headerWriter{header: make(http.Header)}
		allocs := testing.AllocsPerRun(100, func() {
			clear(w.header)
			e.ServeHTTP(w, req)
		})
		if w.status != http.StatusOK {
			t.Fatalf("status %d", w.status)
		}
		return allocs
	}
	bare := serve()
	limited := serve(tollgateechov5.Middleware(l))
	if added := limited - bare - engine; added > 1 {
		t.Errorf("the adapter allocates %v times a request beyond Echo (%v) and the Limiter (%v), want at most 1", added, bare, engine)
	}
}
