package memory

import (
	"os"
	"unsafe"
)

// rdtsc reads the CPU's time-stamp counter.
func rdtsc() int64

func cpuid(leaf uint32) (eax, ebx, ecx, edx uint32)

// tscUsable reports whether the time-stamp counter ticks at a constant
// rate in every state of the CPU (invariant TSC) and the kernel keeps its
// own clock on it, which it does only once it has found the counters of all
// CPUs in step. Not so under kvm-clock: on such a VM the counters of two
// vCPUs were measured up to 55 µs apart (BenchmarkClockAcrossCPUs).
func tscUsable() bool {
	if max, _, _, _ := cpuid(0x80000000); max < 0x80000007 {
		return false
	}
	if _, _, _, edx := cpuid(0x80000007); edx&(1<<8) == 0 {
		return false
	}
	src, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	return err == nil && string(src) == "tsc\n"
}

// prefetchw asks for the cache line at p with the intent to write it, on
// CPUs that have PREFETCHW.
//
//go:noescape
func prefetchw(p unsafe.Pointer)

var hasPrefetchW = func() bool {
	_, _, ecx, _ := cpuid(0x80000001)
	return ecx&(1<<8) != 0
}()
