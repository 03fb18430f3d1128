//go:build !unix

package testredis

import (
	"errors"
	"os"
)

var errNoPause = errors.New("testredis: pausing a process needs SIGSTOP (Unix only)")

func pause(*os.Process) error  { return errNoPause }
func resume(*os.Process) error { return errNoPause }
