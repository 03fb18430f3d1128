package tollgateprom_test

import (
	"context"
	"fmt"
	"log"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	tollgateprom "github.com/tollgate-go/tollgate/prometheus"
)

func Example() {
	store := memory.New()
	defer store.Close()
	metrics, err := tollgateprom.New(tollgateprom.WithStore(store))
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := tollgate.New(store, tollgate.SinglePlan(tollgate.Plan{Name: "free", Limit: tollgate.Limit{Rate: 1, Burst: 2}}),
		tollgate.WithObserver(metrics), tollgate.WithLogger(nil))
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics)

	for range 3 {
		limiter.Take(context.Background(), tollgate.Request{Tenant: "acme", Method: "GET", Route: "GET /api/hello"})
	}

	families, _ := reg.Gather()
	for _, f := range families {
		if f.GetName() != "tollgate_decisions_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if v := m.GetCounter().GetValue(); v > 0 {
				fmt.Print(f.GetName(), "{")
				for i, l := range m.GetLabel() {
					if i > 0 {
						fmt.Print(",")
					}
					fmt.Printf("%s=%q", l.GetName(), l.GetValue())
				}
				fmt.Println("}", v)
			}
		}
	}
	// Output:
	// tollgate_decisions_total{outcome="allowed",plan="free",policy="free",route="GET /api/hello"} 2
	// tollgate_decisions_total{outcome="denied",plan="free",policy="free",route="GET /api/hello"} 1
}

// The Collector of a Limiter, served on /metrics with the Go runtime's
// metrics of the default registry.
func ExampleNew() {
	store := memory.New()
	metrics, err := tollgateprom.New(tollgateprom.WithStore(store))
	if err != nil {
		log.Fatal(err)
	}
	plans, err := tollgate.NewStaticResolver(tollgate.DefaultPlans(), "free", nil)
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := tollgate.New(store, plans, tollgate.WithObserver(metrics))
	if err != nil {
		log.Fatal(err)
	}
	prometheus.MustRegister(metrics)
	http.Handle("GET /metrics", promhttp.Handler())
	_ = limiter // limit the application's routes with it
}
