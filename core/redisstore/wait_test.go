package redisstore_test

import (
	"testing"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/redisstore"
	"github.com/tollgate-go/tollgate/core/storetest"
)

// TestWaitFourStores runs the kit's checks of Limiter.Wait with
// storetest.WaitCallers goroutines spread over four Limiters, each on a
// Store with a client of its own, on one Redis and its clock: four
// replicas sharing tenants' budgets.
func TestWaitFourStores(t *testing.T) {
	prefix := testPrefix(t)
	var stores []tollgate.MultiStore
	for range 4 {
		stores = append(stores, newStore(t, newClient(t), redisstore.WithPrefix(prefix)))
	}
	storetest.RunWait(t, stores)
}
