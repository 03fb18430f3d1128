//go:build !amd64

package memory

import "unsafe"

func rdtsc() int64 { return 0 }

func rdtscOrdered() int64 { return 0 }

func tscUsable() bool { return false }

func prefetchw(unsafe.Pointer) {}
