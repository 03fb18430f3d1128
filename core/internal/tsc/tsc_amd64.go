package tsc

// rdtsc reads the CPU's time-stamp counter as RDTSC does, out of order with
// the loads around it: the clock's read. rdtscOrdered waits for the loads
// before it, as the kernel's clock does; only benchmarks read it, to show
// what that order costs.
func rdtsc() int64

func rdtscOrdered() int64

// cpuid runs CPUID at leaf, subleaf 0.
func cpuid(leaf uint32) (eax, ebx, ecx, edx uint32)

// CPUID runs CPUID at leaf, subleaf 0, on amd64; elsewhere it returns
// zeros.
func CPUID(leaf uint32) (eax, ebx, ecx, edx uint32) { return cpuid(leaf) }

// tscUsable reports whether the time-stamp counter ticks at a constant
// rate in every state of the CPU (invariant TSC).
func tscUsable() bool {
	if top, _, _, _ := cpuid(0x80000000); top < 0x80000007 {
		return false
	}
	_, _, _, edx := cpuid(0x80000007)
	return edx&(1<<8) != 0
}
