package tollgatechi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	tollgatechi "github.com/tollgate-go/tollgate/chi"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adaptertest"
	"github.com/tollgate-go/tollgate/core/storetest"
)

// TestAllocs keeps the middleware, registered with Use and so naming the
// route before chi has routed the request, from allocating beyond what the
// Limiter's decision and its headers take. Run it without -race.
func TestAllocs(t *testing.T) {
	plan := tollgate.Plan{Name: "big", Limit: tollgate.Limit{Rate: 1e6, Burst: 1e9}}
	l, err := tollgate.New(storetest.NewModelStore(time.Now), tollgate.SinglePlan(plan), tollgate.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	router := func(mw func(http.Handler) http.Handler) http.Handler {
		r := chi.NewRouter()
		if mw != nil {
			r.Use(mw)
		}
		r.Get("/x", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
		return r
	}
	adaptertest.CheckAllocs(t, l, router(nil), router(tollgatechi.Middleware(l)), 0)
}
