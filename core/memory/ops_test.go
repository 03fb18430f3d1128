package memory_test

import (
	"testing"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/core/storetest"
)

func TestOpsConformance(t *testing.T) {
	storetest.RunOps(t, func(t *testing.T, clock *storetest.Clock) tollgate.MultiStore {
		s := memory.New(memory.WithClock(clock.Now))
		t.Cleanup(func() { s.Close() })
		return s
	})
}
