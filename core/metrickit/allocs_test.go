//go:build !race

// The race detector allocates on its own: the allocation tests run without
// it (make test-allocs).

package metrickit_test

import (
	"testing"

	"github.com/tollgate-go/tollgate/core/metrickit/metrictest"
)

func TestObserveAllocatesNothing(t *testing.T) {
	metrictest.CheckAllocs(t, observer{newTally(t, true, limit(1))})
}
