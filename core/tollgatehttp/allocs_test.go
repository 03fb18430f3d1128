package tollgatehttp_test

import (
	"context"
	"net/http"
	"testing"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adaptertest"
	"github.com/tollgate-go/tollgate/core/tollgatehttp"
)

// freeStore allows everything and allocates nothing, so that what is
// measured is the Limiter and the HTTP layer.
type freeStore struct{}

func (freeStore) Take(context.Context, string, tollgate.Limit, int64) (tollgate.Result, error) {
	return tollgate.Result{Allowed: true, Remaining: 1}, nil
}

func (freeStore) Do(_ context.Context, op *tollgate.Op) error {
	op.Allowed = true
	for range op.Rules {
		op.Results = append(op.Results, tollgate.Result{Allowed: true, Remaining: 1})
	}
	return nil
}

// TestDecisionAllocs: a decision allocates nothing, and its headers once
// (their values share one block).
func TestDecisionAllocs(t *testing.T) {
	plan := tollgate.Plan{Name: "p", Limit: tollgate.Limit{Rate: 1, Burst: 10},
		Policies: []tollgate.Policy{{Quota: tollgate.PerDay(100)}}}
	l, err := tollgate.New(freeStore{}, tollgate.SinglePlan(plan), tollgate.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var a tollgatehttp.Answer
	decide := adaptertest.AllocsPerRun(t, 200, func() {
		r := tollgate.Request{Tenant: "acme", Method: http.MethodGet}
		tollgatehttp.Decide(ctx, l, &r, &a)
	})
	if !a.Decision.Allowed || len(a.Decision.Results()) != 2 {
		t.Fatalf("decision %+v, want allowed by two policies", a.Decision)
	}
	h := make(http.Header)
	headers := adaptertest.AllocsPerRun(t, 200, func() {
		clear(h)
		tollgatehttp.WriteHeaders(h, &a.Decision)
	})
	if decide != 0 || headers > 1 {
		t.Errorf("allocations: %v to decide, want 0; %v to write the headers, want at most 1", decide, headers)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /x", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	adaptertest.CheckAllocs(t, l, mux, tollgatehttp.Middleware(l)(mux), 0)
}
