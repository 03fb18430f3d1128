package tollgateotel_test

import (
	"context"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	tollgateotel "github.com/tollgate-go/tollgate/otel"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// prometheusNames are the metric families of tollgateprom and their labels,
// as its documentation lists them (prometheus/doc.go).
var prometheusNames = map[string][]string{
	"tollgate_decisions_total":                  {"outcome", "plan", "policy", "route"},
	"tollgate_tokens_spent_total":               {"plan", "route"},
	"tollgate_store_latency_seconds":            {},
	"tollgate_store_errors_total":               {"kind"},
	"tollgate_resolver_errors_total":            {},
	"tollgate_fallback_decisions_total":         {"outcome"},
	"tollgate_delay_seconds":                    {},
	"tollgate_label_overflow_total":             {},
	"tollgate_store_keys":                       {"store"},
	"tollgate_store_evictions_total":            {"store"},
	"tollgate_store_drained_evictions_total":    {"store"},
	"tollgate_store_breaker_state":              {"state", "store"},
	"tollgate_store_breaker_opens_total":        {"store"},
	"tollgate_store_denial_cache_answers_total": {"store"},
}

// Through OpenTelemetry's own Prometheus exporter, with its default
// translation, the instruments come out under tollgateprom's names and
// labels: a dashboard or alert written for one works with the other.
func TestPrometheusExporterGivesTollgatepromNames(t *testing.T) {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutTargetInfo(), otelprom.WithoutScopeInfo())
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(context.Background())
	local := memory.New(memory.WithSweepInterval(0))
	defer local.Close()
	redis := &fakeRedis{flakyStore: *newModel(), state: "closed"}
	metrics, err := tollgateotel.New(tollgateotel.WithMeterProvider(mp), tollgateotel.WithStore(redis), tollgateotel.WithFallbackStore(local))
	if err != nil {
		t.Fatal(err)
	}
	defer metrics.Close()
	runMix(t, metrics)
	metrics.Observe(context.Background(), tollgate.Observation{Plan: "p", Outcome: tollgate.OutcomeFailedOpen, ErrorKind: "timeout"})

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, f := range families {
		labels := []string{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if !slices.Contains(labels, l.GetName()) && !strings.HasPrefix(l.GetName(), "otel_") {
					labels = append(labels, l.GetName())
				}
			}
		}
		sort.Strings(labels)
		got[f.GetName()] = labels
	}
	for name, labels := range prometheusNames {
		if g, ok := got[name]; !ok {
			t.Errorf("no %s among %v", name, keys(got))
		} else if !slices.Equal(g, labels) {
			t.Errorf("%s has labels %v, want %v", name, g, labels)
		}
	}
	for name := range got {
		if _, ok := prometheusNames[name]; !ok {
			t.Errorf("%s is not a tollgateprom metric", name)
		}
	}
}

func keys(m map[string][]string) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	sort.Strings(k)
	return k
}
