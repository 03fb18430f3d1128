package redistest

import "syscall"

// sysProcAttr has the kernel kill redis-server if the test process dies
// first (a panic, a -timeout, a SIGKILL), when no cleanup runs.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
