package tollgate_test

import (
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
