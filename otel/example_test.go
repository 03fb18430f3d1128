package tollgateotel_test

import (
	"context"
	"fmt"
	"log"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	tollgateotel "github.com/tollgate-go/tollgate/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

func Example() {
	reader := sdkmetric.NewManualReader() // in production, a PeriodicReader with an exporter
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())

	store := memory.New()
	defer store.Close()
	metrics, err := tollgateotel.New(tollgateotel.WithMeterProvider(provider), tollgateotel.WithStore(store))
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := tollgate.New(store, tollgate.SinglePlan(tollgate.Plan{Name: "free", Limit: tollgate.Limit{Rate: 1, Burst: 2}}),
		tollgate.WithObserver(metrics), tollgate.WithLogger(nil))
	if err != nil {
		log.Fatal(err)
	}
	for range 3 {
		limiter.Take(context.Background(), tollgate.Request{Tenant: "acme", Method: "GET", Route: "GET /api/hello"})
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "tollgate.decisions" {
				continue
			}
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if outcome, _ := p.Attributes.Value("outcome"); p.Value > 0 {
					route, _ := p.Attributes.Value("route")
					fmt.Println(m.Name, outcome.AsString(), route.AsString(), p.Value)
				}
			}
		}
	}
	// Unordered output:
	// tollgate.decisions allowed GET /api/hello 2
	// tollgate.decisions denied GET /api/hello 1
}
