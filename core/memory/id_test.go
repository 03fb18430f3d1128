package memory_test

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/tollgate-go/tollgate/core/memory"
	"github.com/tollgate-go/tollgate/core/storetest"
)

// TestTenantIDIsCopied: a Store keeps its own copy of every tenant ID, short
// (kept beside the tenant's state), at the length where that stops, and
// long, as a caller's ID may live in a buffer that it reuses for the next
// request, as Fiber's do.
func TestTenantIDIsCopied(t *testing.T) {
	for _, n := range []int{1, 8, 16, 17, 64, 65, 300} {
		clock := storetest.NewClock()
		s := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0))
		buf := []byte(strings.Repeat("a", n))
		reused := unsafe.String(&buf[0], len(buf))
		take(t, s, reused, limit, limit.Burst)
		buf[n-1] = 'b'
		if r := take(t, s, strings.Repeat("a", n), limit, 1); r.Allowed {
			t.Errorf("%d bytes: the first tenant, whose ID's buffer was reused, is allowed again: %+v", n, r)
		}
		if r := take(t, s, reused, limit, 1); !r.Allowed {
			t.Errorf("%d bytes: the ID now in the buffer, a new tenant, is denied: %+v", n, r)
		}
		if got := s.Stats().Tenants; got != 2 {
			t.Errorf("%d bytes: %d tenants held, want 2", n, got)
		}
		s.Close()
	}
}
