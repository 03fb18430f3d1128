package storetest_test

import (
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/storetest"
)

// TestModelStoreOps runs the Op table on the reference store itself, which
// checks the table's stated figures against Model.
func TestModelStoreOps(t *testing.T) {
	storetest.RunOps(t, func(t *testing.T, clock *storetest.Clock) tollgate.MultiStore {
		return storetest.NewModelStore(clock.Now)
	})
}

// TestModelStoreWait runs the checks of Limiter.Wait with
// storetest.WaitCallers goroutines on one ModelStore on the real clock.
func TestModelStoreWait(t *testing.T) {
	storetest.RunWait(t, []tollgate.MultiStore{storetest.NewModelStore(time.Now)})
}
