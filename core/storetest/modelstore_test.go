package storetest_test

import (
	"testing"
	"time"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/storetest"
)

// TestModelStore runs the kit on the reference store itself, which checks
// the figures the kit's tables state against Model.
func TestModelStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clock *storetest.Clock) tollgate.Store {
		return storetest.NewModelStore(clock.Now)
	})
}

// TestModelStoreWait runs the checks of Limiter.Wait with
// storetest.WaitCallers goroutines on one ModelStore on the real clock.
func TestModelStoreWait(t *testing.T) {
	storetest.RunWait(t, []tollgate.Store{storetest.NewModelStore(time.Now)})
}
