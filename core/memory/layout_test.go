package memory

import (
	"testing"
	"unsafe"
)

// TestTenantFillsACacheLine: a tenant's ID and TAT are read together, from
// one cache line (see tenant), on 64-bit platforms.
func TestTenantFillsACacheLine(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("a 32-bit platform")
	}
	if n := unsafe.Sizeof(tenant{}); n != 64 {
		t.Fatalf("a tenant is %d bytes, want 64", n)
	}
}
