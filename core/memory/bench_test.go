package memory_test

import (
	"context"
	"strings"
	"testing"

	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/memory"
)

// BenchmarkTake is one goroutine taking a token of one tracked key, through
// the tollgate.Store interface, under a limit that never denies: the path
// whose cost docs/performance.md breaks down.
func BenchmarkTake(b *testing.B) {
	s := memory.New()
	defer s.Close()
	var st tollgate.Store = s
	ctx := context.Background()
	lim := tollgate.Limit{Rate: 100, Burst: 1e9}
	st.Take(ctx, "tenant-0", lim, 1)
	key := strings.Clone("tenant-0")
	b.ReportAllocs()
	for b.Loop() {
		st.Take(ctx, key, lim, 1)
	}
}
