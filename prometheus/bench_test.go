package tollgateprom_test

import (
	"context"
	"fmt"
	"testing"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/metrickit/metrictest"
	tollgateprom "github.com/tollgate-go/tollgate/prometheus"
)

// BenchmarkObserve is the Collector's own cost per decision (bench/ has the
// Limiter's): 16 label sets, allowed decisions of cost 1.
func BenchmarkObserve(b *testing.B) {
	c, err := tollgateprom.New()
	if err != nil {
		b.Fatal(err)
	}
	l := metrictest.NewLimiter(b, metrictest.NewStore())
	var ds []tollgate.Decision
	for i := range 16 {
		d, err := l.Take(context.Background(), tollgate.Request{Tenant: fmt.Sprint("t", i), Route: fmt.Sprint("GET /api/route-", i/4)})
		if err != nil || !d.Allowed {
			b.Fatal(d.Outcome(), err)
		}
		ds = append(ds, d)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		c.Observe(ctx, &ds[i&15])
	}
}
