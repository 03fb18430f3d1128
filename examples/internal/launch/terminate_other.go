//go:build !unix

package launch

import "os"

// terminate stops p; other systems have no signal a child can catch.
func terminate(p *os.Process) error { return p.Kill() }
