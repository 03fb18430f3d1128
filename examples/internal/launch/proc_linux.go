package launch

import (
	"os/exec"
	"syscall"
)

// setProcAttr has the kernel kill the app if this process dies first, so
// that a test binary killed by its timeout leaves no server behind.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
