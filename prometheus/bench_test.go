package tollgateprom_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	tollgateprom "github.com/tollgate-go/tollgate/prometheus"
)

// BenchmarkObserve is the Collector's own cost per decision (bench/ has the
// Limiter's): 16 label sets, allowed decisions of cost 1.
func BenchmarkObserve(b *testing.B) {
	c, err := tollgateprom.New()
	if err != nil {
		b.Fatal(err)
	}
	var obs []tollgate.Observation
	for i := range 16 {
		plan := fmt.Sprint("plan-", i%4)
		obs = append(obs, tollgate.Observation{Plan: plan, Policy: plan, Route: fmt.Sprint("GET /api/route-", i/4),
			Outcome: tollgate.OutcomeAllowed, Cost: 1, StoreLatency: 300 * time.Nanosecond})
	}
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		c.Observe(ctx, obs[i&15])
	}
}
