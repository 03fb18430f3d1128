//go:build !amd64

package memory

import "unsafe"

func prefetchw(unsafe.Pointer) {}
