//go:build !race

// The race detector allocates on its own: the allocation tests run without
// it (make test-allocs).

package tally_test

import (
	"testing"

	"github.com/tollgate-go/tollgate/internal/tally/tallytest"
)

func TestObserveAllocatesNothing(t *testing.T) {
	tallytest.CheckAllocs(t, observer{newTally(t, true, limit(1))})
}
