//go:build unix

package launch

import (
	"os"
	"syscall"
)

// terminate asks p to shut down gracefully.
func terminate(p *os.Process) error { return p.Signal(syscall.SIGTERM) }
