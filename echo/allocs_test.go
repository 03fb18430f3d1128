package tollgateecho_test

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"

	tollgate "github.com/tollgate-go/tollgate/core"
	tollgateecho "github.com/tollgate-go/tollgate/echo"
)

type headerWriter struct {
	header http.Header
	status int
}

func (w *headerWriter) Header() http.Header         { return w.header }
func (w *headerWriter) WriteHeader(status int)      { w.status = status }
func (w *headerWriter) Write(p []byte) (int, error) { return len(p), nil }

// TestAllocs keeps the adapter from allocating on the allowed path beyond
// what the Limiter's decision and headers take.
func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	l, _ := newLimiter(t, tollgate.Plan{Name: "big", Limit: tollgate.Limit{Rate: 1e6, Burst: 1e9}})
	e := newEcho()
	e.GET("/x", func(c echo.Context) error { return c.NoContent(http.StatusOK) }, tollgateecho.Middleware(l))
	req, _ := http.NewRequest("GET", "/x", nil)
	req.Header.Set("X-Tenant-ID", "acme")
	w := &headerWriter{header: make(http.Header)}
	allocs := testing.AllocsPerRun(100, func() {
		clear(w.header)
		e.ServeHTTP(w, req)
	})
	if w.header.Get("X-RateLimit-Remaining") == "" {
		t.Fatal("no rate-limit headers")
	}
	// Decision.WriteHeaders allocates twice, the values and their slices,
	// and Echo v4 builds every middleware's wrapper anew on each request.
	if allocs > 3 {
		t.Errorf("%v allocations a request, want at most 3", allocs)
	}
}
