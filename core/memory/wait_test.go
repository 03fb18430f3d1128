package memory_test

import (
	"testing"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/core/storetest"
)

// TestWait runs the kit's checks of Limiter.Wait with
// storetest.WaitCallers goroutines on one Store, on its own clock.
func TestWait(t *testing.T) {
	s := memory.New()
	t.Cleanup(func() { _ = s.Close() })
	storetest.RunWait(t, []tollgate.MultiStore{s})
}
