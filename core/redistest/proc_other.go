//go:build !unix

package redistest

import (
	"errors"
	"os"
)

var errNoPause = errors.New("redistest: pausing a process needs SIGSTOP (Unix only)")

func pause(*os.Process) error  { return errNoPause }
func resume(*os.Process) error { return errNoPause }
