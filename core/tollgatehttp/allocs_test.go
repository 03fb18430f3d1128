package tollgatehttp_test

import (
	"context"
	"net/http"
	"testing"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adapterkit"
	"github.com/tollgate-go/tollgate/core/adaptertest"
	"github.com/tollgate-go/tollgate/core/storekit"
	"github.com/tollgate-go/tollgate/core/tollgatehttp"
)

// freeStore allows everything and allocates nothing, so that what is
// measured is the Limiter and the HTTP layer.
type freeStore struct{}

func (freeStore) Do(_ context.Context, op *storekit.Op) error {
	op.Allowed = true
	for range op.Rules {
		op.Results = append(op.Results, tollgate.Result{Allowed: true, Remaining: 1})
	}
	return nil
}

// TestAllocs: the headers of a decision take one allocation (their values
// share one block), and the middleware none of its own.
func TestAllocs(t *testing.T) {
	plan := tollgate.Plan{Name: "p", Limit: tollgate.Limit{Rate: 1, Burst: 10},
		Policies: []tollgate.Policy{{Quota: tollgate.Quota{Tokens: 100, Period: tollgate.Daily}}}}
	l, err := tollgate.New(freeStore{}, tollgate.SinglePlan(plan), tollgate.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	d, err := l.Take(context.Background(), tollgate.Request{Tenant: "acme"})
	if err != nil || !d.Allowed || len(d.Results()) != 2 {
		t.Fatalf("decision %+v, %v: want allowed by two policies", d, err)
	}
	h := make(http.Header)
	if headers := adaptertest.AllocsPerRun(t, 200, func() {
		clear(h)
		adapterkit.WriteHeaders(h, &d)
	}); headers > 1 {
		t.Errorf("%v allocations to write the headers, want at most 1", headers)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /x", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	adaptertest.CheckAllocs(t, l, mux, tollgatehttp.Middleware(l)(mux), 0)
}
