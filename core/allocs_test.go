package tollgate_test

import (
	"context"
	"testing"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/adaptertest"
	"github.com/tollgate-go/tollgate/core/memory"
)

// TestDecisionAllocs: on the memory store, a Take and a Wait that need not
// wait allocate nothing. A Decision that escaped to the heap would cost one
// allocation of its whole size a call, and the garbage collector's work.
func TestDecisionAllocs(t *testing.T) {
	s := memory.New()
	t.Cleanup(func() { s.Close() })
	plan := tollgate.Plan{Name: "p", Limit: tollgate.Limit{Rate: 1e6, Burst: 1e9}}
	l, err := tollgate.New(s, tollgate.SinglePlan(plan), tollgate.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := tollgate.Request{Tenant: "acme"}
	for name, decide := range map[string]func(context.Context, tollgate.Request) (tollgate.Decision, error){
		"Take": l.Take,
		"Wait": l.Wait,
	} {
		if d, err := decide(ctx, req); err != nil || !d.Allowed {
			t.Fatalf("%s: %+v, %v; want allowed", name, d, err)
		}
		if n := adaptertest.AllocsPerRun(t, 500, func() { _, _ = decide(ctx, req) }); n != 0 {
			t.Errorf("%s: %v allocations a decision, want none", name, n)
		}
	}
}
