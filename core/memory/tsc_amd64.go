package memory

import "unsafe"

// rdtsc reads the CPU's time-stamp counter as RDTSC does, out of order with
// the loads around it; rdtscOrdered waits for the loads before it, as the
// kernel's clock does. Only BenchmarkClockAcrossCPUs and BenchmarkTakeParts
// read them, to show why the Store reads the runtime's clock instead.
func rdtsc() int64

func rdtscOrdered() int64

// cpuid runs CPUID at leaf, subleaf 0. hasPrefetchW calls it; the linter
// takes both for unused, as only tsc_amd64.s reads hasPrefetchW.
//
//nolint:unused
func cpuid(leaf uint32) (eax, ebx, ecx, edx uint32)

// prefetchw asks for the cache line at p with the intent to write it, on
// CPUs that have PREFETCHW.
//
//go:noescape
func prefetchw(p unsafe.Pointer)

var hasPrefetchW = func() bool {
	_, _, ecx, _ := cpuid(0x80000001)
	return ecx&(1<<8) != 0
}()
