package tollgateotel_test

import (
	"context"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tollgate-go/tollgate/core/metrickit"
	"github.com/tollgate-go/tollgate/core/metrickit/metrictest"
	"github.com/tollgate-go/tollgate/core/storekit"
	tollgateotel "github.com/tollgate-go/tollgate/otel"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

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
	store := metrictest.NewStore()
	store.SetStats(storekit.Stats{Tenants: 1})
	metrics, err := tollgateotel.New(tollgateotel.WithMeterProvider(mp), tollgateotel.WithStore(store), tollgateotel.WithFallbackStore(metrictest.NewStore()))
	if err != nil {
		t.Fatal(err)
	}
	defer metrics.Close()
	metrictest.RunMix(t, metrics)

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
	want := map[string][]string{}
	for _, m := range metrickit.Metrics {
		want[m.Prometheus] = slices.Sorted(slices.Values(m.Labels))
		if want[m.Prometheus] == nil {
			want[m.Prometheus] = []string{}
		}
	}
	for name, labels := range want {
		if g, ok := got[name]; !ok {
			t.Errorf("no %s among %v", name, slices.Sorted(maps.Keys(got)))
		} else if !slices.Equal(g, labels) {
			t.Errorf("%s has labels %v, want %v", name, g, labels)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s is not a tollgateprom metric", name)
		}
	}
}
