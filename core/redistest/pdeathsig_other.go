//go:build !linux

package redistest

import "syscall"

// sysProcAttr: only Linux can tie a child's life to its parent's; elsewhere
// a crashed test run may leave its servers behind.
func sysProcAttr() *syscall.SysProcAttr { return nil }
