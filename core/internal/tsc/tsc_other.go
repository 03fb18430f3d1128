//go:build !amd64

package tsc

func rdtsc() int64 { return 0 }

func rdtscOrdered() int64 { return 0 }

// CPUID runs CPUID at leaf, subleaf 0, on amd64; elsewhere it returns
// zeros.
func CPUID(uint32) (eax, ebx, ecx, edx uint32) { return 0, 0, 0, 0 }

func tscUsable() bool { return false }
