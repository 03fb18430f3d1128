package memory_test

import (
	"testing"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/core/storetest"
)

// TestWait runs the kit's checks of Limiter.Wait with
// storetest.WaitCallers goroutines on one Store, on its own clock, once
// the Store runs Ops (reservations need tollgate.MultiStore).
func TestWait(t *testing.T) {
	store := memory.New()
	t.Cleanup(func() { _ = store.Close() })
	s, ok := any(store).(tollgate.MultiStore)
	if !ok {
		t.Skip("the memory store does not implement tollgate.MultiStore yet: Wait needs reservations")
	}
	storetest.RunWait(t, []tollgate.MultiStore{s})
}
