//go:build !amd64

package memory

func rdtsc() int64 { return 0 }

func tscUsable() bool { return false }
