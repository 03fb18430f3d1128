package tollgateotel_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/tollgate-go/tollgate/core/metrickit"
	tollgateotel "github.com/tollgate-go/tollgate/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// newMetrics returns a Metrics on a MeterProvider of its own, and the
// reader that collects it.
func newMetrics(t *testing.T, opts ...tollgateotel.Option) (*tollgateotel.Metrics, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	m, err := tollgateotel.New(append([]tollgateotel.Option{tollgateotel.WithMeterProvider(mp)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, reader
}

// points collects reader and flattens its points into
// name{key="value",...} -> value, attributes sorted; a histogram gives
// name_count, name_sum and name_bucket{le="bound"} (cumulative, as
// Prometheus counts them).
func points(t *testing.T, reader *sdkmetric.ManualReader) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	key := func(name string, set attribute.Set, extra ...string) string {
		var pairs []string
		for _, kv := range set.ToSlice() {
			pairs = append(pairs, fmt.Sprintf("%s=%q", kv.Key, kv.Value.String()))
		}
		pairs = append(pairs, extra...)
		sort.Strings(pairs)
		return name + "{" + strings.Join(pairs, ",") + "}"
	}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != tollgateotel.ScopeName {
			t.Errorf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range data.DataPoints {
					out[key(m.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range data.DataPoints {
					out[key(m.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range data.DataPoints {
					out[key(m.Name+"_count", p.Attributes)] = float64(p.Count)
					out[key(m.Name+"_sum", p.Attributes)] = p.Sum
					var cum uint64
					for i, b := range p.Bounds {
						cum += p.BucketCounts[i]
						out[key(m.Name+"_bucket", p.Attributes, fmt.Sprintf("le=%q", fmt.Sprint(b)))] = float64(cum)
					}
				}
			default:
				t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return out
}

// name is the Metrics' name of an instrument.
func name(m *metrickit.Metric) string { return m.Name }
