package tollgatehttp_test

import (
	"net/http"
	"testing"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/tollgatehttp"
)

// BenchmarkMiddleware measures what the middleware adds to an allowed
// request over a store that does no work.
func BenchmarkMiddleware(b *testing.B) {
	l, err := tollgate.New(freeStore{}, tollgate.SinglePlan(tollgate.Plan{Name: "p", Limit: tollgate.Limit{Rate: 1, Burst: 10}}), tollgate.WithLogger(nil))
	if err != nil {
		b.Fatal(err)
	}
	h := tollgatehttp.Middleware(l)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	req, _ := http.NewRequest(http.MethodGet, "/x", nil)
	req.Header.Set(tollgatehttp.DefaultTenantHeader, "acme")
	w := newRecorder()
	b.ReportAllocs()
	for b.Loop() {
		clear(w.header)
		h.ServeHTTP(w, req)
	}
}
