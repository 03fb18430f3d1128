package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/core/storetest"
	tollgateotel "github.com/tollgate-go/tollgate/otel"
	tollgateprom "github.com/tollgate-go/tollgate/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// metricsTenants and metricsRoutes are the requests of BenchmarkMetrics:
// 1,000 tenants on four plans, over four routes, so 16 label sets.
const metricsTenants = 1000

var metricsRoutes = []string{"GET /api/hello", "POST /api/reports", "GET /api/users/{id}", "DELETE /api/users/{id}"}

// metricsPlans are the default plans' names with limits no request reaches,
// so that every decision is allowed (the path that counts the most: the
// decision, its tokens and the store latency).
func metricsPlans(b *testing.B) tollgate.PlanResolver {
	names := []string{"free", "startup", "growth", "enterprise"}
	var plans []tollgate.Plan
	for _, n := range names {
		plans = append(plans, tollgate.Plan{Name: n, Limit: tollgate.Limit{Rate: 1e6, Burst: 1e9}})
	}
	tenants := map[string]string{}
	for i := range metricsTenants {
		tenants[fmt.Sprint("tenant-", i)] = names[i%len(names)]
	}
	r, err := tollgate.NewStaticResolver(plans, "free", tenants)
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// metricsObservers are the cases of BenchmarkMetrics: no observer; an
// observer that does nothing (what the engine spends on observing at all: a
// call with a pointer to the Decision); the
// Prometheus Collector; promvec, the same three counts kept the usual way
// with the Prometheus client (CounterVec.WithLabelValues and
// Histogram.Observe per decision); tollgateotel on the OpenTelemetry SDK (a
// MeterProvider with a reader, as an application has); and the same with a
// View that drops the store latency histogram, the one instrument whose
// cost is the SDK's on every decision.
var metricsObservers = []struct {
	name string
	make func(b *testing.B) tollgate.Observer
}{
	{"none", func(*testing.B) tollgate.Observer { return nil }},
	{"nop", func(*testing.B) tollgate.Observer { return nopObserver{} }},
	{"prometheus", func(b *testing.B) tollgate.Observer {
		c, err := tollgateprom.New()
		if err != nil {
			b.Fatal(err)
		}
		return c
	}},
	{"promvec", func(*testing.B) tollgate.Observer { return newVecObserver() }},
	{"otel", func(b *testing.B) tollgate.Observer {
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		b.Cleanup(func() { mp.Shutdown(context.Background()) })
		m, err := tollgateotel.New(tollgateotel.WithMeterProvider(mp))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { m.Close() })
		return m
	}},
	{"otel-nolatency", func(b *testing.B) tollgate.Observer {
		drop := sdkmetric.NewView(sdkmetric.Instrument{Name: "tollgate.store.latency"}, sdkmetric.Stream{Aggregation: sdkmetric.AggregationDrop{}})
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()), sdkmetric.WithView(drop))
		b.Cleanup(func() { mp.Shutdown(context.Background()) })
		m, err := tollgateotel.New(tollgateotel.WithMeterProvider(mp))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { m.Close() })
		return m
	}},
}

// vecObserver is what an application would write on its own with the
// Prometheus client: labelled vectors looked up per decision.
type vecObserver struct {
	decisions *prometheus.CounterVec
	tokens    *prometheus.CounterVec
	latency   prometheus.Histogram
}

func newVecObserver() *vecObserver {
	return &vecObserver{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "decisions_total"}, []string{"plan", "policy", "route", "outcome"}),
		tokens:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tokens_total"}, []string{"plan", "route"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "latency_seconds",
			Buckets: []float64{25e-6, 50e-6, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, .01, .025, .05, .1}}),
	}
}

func (v *vecObserver) Observe(_ context.Context, d *tollgate.Decision) {
	outcome := d.Outcome()
	v.decisions.WithLabelValues(d.Plan, d.Policy, d.Route, outcome).Inc()
	if outcome == "allowed" || outcome == "delayed" {
		v.tokens.WithLabelValues(d.Plan, d.Route).Add(float64(d.Cost))
	}
	v.latency.Observe(d.Latency.Seconds())
}

type nopObserver struct{}

func (nopObserver) Observe(context.Context, *tollgate.Decision) {}

// BenchmarkMetrics measures what the metrics modules add to a decision:
// Limiter.Take on allowed requests of 1,000 tenants on four plans over
// four routes, with each observer of metricsObservers, so that `benchstat
// -col /metrics` sets them side by side. The budget is 50 ns and 0
// allocations over metrics=none.
//
//   - store=memory: the in-process store (one policy per plan).
//   - store=model: storetest.ModelStore, the reference store (a mutex and
//     a map: slow, so the observers' share is smaller).
//   - case=serial: one goroutine; case=parallel: GOMAXPROCS goroutines,
//     each walking the requests from its own random start, all counting
//     into the same counters.
func BenchmarkMetrics(b *testing.B) {
	stores := []struct {
		name string
		make func(b *testing.B) tollgate.Store
	}{
		{"memory", func(b *testing.B) tollgate.Store {
			s := memory.New()
			b.Cleanup(func() { s.Close() })
			return s
		}},
		{"model", func(*testing.B) tollgate.Store { return storetest.NewModelStore(storetest.NewClock().Now) }},
	}
	reqs := make([]tollgate.Request, metricsTenants)
	for i := range reqs {
		reqs[i] = tollgate.Request{Tenant: fmt.Sprint("tenant-", i), Method: "GET", Route: metricsRoutes[i%len(metricsRoutes)]}
	}
	for _, st := range stores {
		for _, mode := range []string{"serial", "parallel"} {
			for _, ob := range metricsObservers {
				b.Run(fmt.Sprintf("store=%s/case=%s/metrics=%s", st.name, mode, ob.name), func(b *testing.B) {
					opts := []tollgate.Option{tollgate.WithLogger(nil)}
					if o := ob.make(b); o != nil {
						opts = append(opts, tollgate.WithObserver(o))
					}
					l, err := tollgate.New(st.make(b), metricsPlans(b), opts...)
					if err != nil {
						b.Fatal(err)
					}
					runDecisions(b, l, reqs, mode == "parallel")
				})
			}
		}
	}
}

// runDecisions times b.N decisions of l on reqs, walked in turn (with
// parallel, from every core at once, each from its own random start), after
// one decision on each request so that every tenant and label set exists.
// It fails b if a decision is denied: the benchmarks' plans must allow all.
func runDecisions(b *testing.B, l *tollgate.Limiter, reqs []tollgate.Request, parallel bool) {
	ctx := context.Background()
	for i := range reqs {
		l.Take(ctx, reqs[i])
	}
	var denied atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	if !parallel {
		i := 0
		for range b.N {
			if d, _ := l.Take(ctx, reqs[i]); !d.Allowed {
				denied.Add(1)
			}
			if i++; i == len(reqs) {
				i = 0
			}
		}
	} else {
		b.RunParallel(func(pb *testing.PB) {
			i, n := rand.IntN(len(reqs)), int64(0)
			for pb.Next() {
				if d, _ := l.Take(ctx, reqs[i]); !d.Allowed {
					n++
				}
				if i++; i == len(reqs) {
					i = 0
				}
			}
			denied.Add(n)
		})
	}
	reportCPU(b, cpu)
	if n := denied.Load(); n > 0 {
		b.Fatalf("%d of %d decisions denied; the plans must allow all", n, b.N)
	}
}
