//go:build !race

// The race detector allocates on its own: the allocation tests run without
// it (make test-allocs).

package tollgateotel_test

import (
	"testing"

	"github.com/tollgate-go/tollgate/core/metrickit/metrictest"
	tollgateotel "github.com/tollgate-go/tollgate/otel"
)

// With the SDK's MeterProvider, histograms included.
func TestObservingAllocatesNothing(t *testing.T) {
	metrics, _ := newMetrics(t, tollgateotel.WithCardinalityLimit(1))
	metrictest.CheckAllocs(t, metrics)
}
