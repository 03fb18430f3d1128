package redistest

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) { os.Exit(Run(m)) }

// do runs one command on the server at addr, failing t on an error.
func do(t *testing.T, addr string, args ...string) any {
	t.Helper()
	reply, err := command(addr, 5*time.Second, args...)
	if err != nil {
		t.Fatalf("%s on %s: %v", strings.Join(args, " "), addr, err)
	}
	return reply
}
