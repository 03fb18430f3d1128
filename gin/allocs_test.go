package tollgategin_test

import (
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"

	tollgate "github.com/tollgate-go/tollgate/core"
	tollgategin "github.com/tollgate-go/tollgate/gin"
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
	r := gin.New()
	r.GET("/x", tollgategin.New(l), func(c *gin.Context) { c.Status(http.StatusOK) })
	req, _ := http.NewRequest("GET", "/x", nil)
	req.Header.Set("X-Tenant-ID", "acme")
	w := &headerWriter{header: make(http.Header)}
	allocs := testing.AllocsPerRun(100, func() {
		clear(w.header)
		r.ServeHTTP(w, req)
	})
	if w.header.Get("X-RateLimit-Remaining") == "" {
		t.Fatal("no rate-limit headers")
	}
	// Decision.WriteHeaders allocates twice: the values and their slices.
	if allocs > 2 {
		t.Errorf("%v allocations a request, want at most 2", allocs)
	}
}
