package memory

import "unsafe"

// rdtsc reads the CPU's time-stamp counter as RDTSC does, out of order with
// the loads around it: the Store's clock (clock.go). rdtscOrdered waits for
// the loads before it, as the kernel's clock does; only the benchmarks read
// it, to show what that order costs.
func rdtsc() int64

func rdtscOrdered() int64

// cpuid runs CPUID at leaf, subleaf 0.
func cpuid(leaf uint32) (eax, ebx, ecx, edx uint32)

// tscUsable reports whether the time-stamp counter ticks at a constant
// rate in every state of the CPU (invariant TSC).
func tscUsable() bool {
	if top, _, _, _ := cpuid(0x80000000); top < 0x80000007 {
		return false
	}
	_, _, _, edx := cpuid(0x80000007)
	return edx&(1<<8) != 0
}

// prefetchw asks for the cache line at p with the intent to write it, on
// CPUs that have PREFETCHW.
//
//go:noescape
func prefetchw(p unsafe.Pointer)

// hasPrefetchW is read by tsc_amd64.s alone, which the linter does not see.
//
//nolint:unused
var hasPrefetchW = func() bool {
	_, _, ecx, _ := cpuid(0x80000001)
	return ecx&(1<<8) != 0
}()
