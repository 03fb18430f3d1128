package memory

import (
	"unsafe"

	"github.com/tollgate-go/tollgate/core/internal/tsc"
)

// prefetchw asks for the cache line at p with the intent to write it, on
// CPUs that have PREFETCHW.
//
//go:noescape
func prefetchw(p unsafe.Pointer)

// hasPrefetchW is read by tsc_amd64.s alone, which the linter does not see.
//
//nolint:unused
var hasPrefetchW = func() bool {
	_, _, ecx, _ := tsc.CPUID(0x80000001)
	return ecx&(1<<8) != 0
}()
