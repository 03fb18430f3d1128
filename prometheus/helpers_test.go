package tollgateprom_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/tollgate-go/tollgate/core/metrickit"
)

// samples flattens metric families into name{label="value",...} -> value,
// labels sorted; a histogram gives its _count, _sum and _bucket samples.
func samples(t *testing.T, families []*dto.MetricFamily) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var pairs []string
			for _, l := range m.GetLabel() {
				pairs = append(pairs, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			key := func(name string, extra ...string) string {
				all := append(append([]string(nil), pairs...), extra...)
				sort.Strings(all)
				return name + "{" + strings.Join(all, ",") + "}"
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[key(f.GetName())] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key(f.GetName())] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				out[key(f.GetName()+"_count")] = float64(h.GetSampleCount())
				out[key(f.GetName()+"_sum")] = h.GetSampleSum()
				for _, b := range h.GetBucket() {
					le := fmt.Sprintf("le=%q", fmt.Sprint(b.GetUpperBound()))
					out[key(f.GetName()+"_bucket", le)] = float64(b.GetCumulativeCount())
				}
				out[key(f.GetName()+"_bucket", `le="+Inf"`)] = float64(h.GetSampleCount())
			default:
				t.Fatalf("unexpected metric type %v of %s", f.GetType(), f.GetName())
			}
		}
	}
	return out
}

// gather registers c alone in a fresh pedantic registry (which checks
// descriptions against metrics) and returns its samples.
func gather(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return samples(t, families)
}

// name is the Collector's name of a metric.
func name(m *metrickit.Metric) string { return m.Prometheus }
