package tollgate_test

import (
	"context"
	"testing"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
)

// BenchmarkTake is one decision of a tracked tenant on the memory store,
// with the default plans and logging on, as an application runs it.
func BenchmarkTake(b *testing.B) {
	store := memory.New()
	defer store.Close()
	plans, _ := tollgate.NewStaticResolver(tollgate.DefaultPlans(), "enterprise", nil)
	l, err := tollgate.New(store, plans)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	req := tollgate.Request{Tenant: "acme", Method: "GET", Route: "/api/hello"}
	b.ReportAllocs()
	for b.Loop() {
		if d, _ := l.Take(ctx, req); !d.Allowed && !d.Degraded {
			l.Reset(ctx, "acme")
		}
	}
}
