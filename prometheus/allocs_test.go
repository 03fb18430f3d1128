//go:build !race

// The race detector allocates on its own: the allocation tests run without
// it (make test-allocs).

package tollgateprom_test

import (
	"testing"

	"github.com/tollgate-go/tollgate/core/metrickit/metrictest"
	tollgateprom "github.com/tollgate-go/tollgate/prometheus"
)

func TestObservingAllocatesNothing(t *testing.T) {
	metrictest.CheckAllocs(t, newCollector(t, tollgateprom.WithCardinalityLimit(1)))
}
