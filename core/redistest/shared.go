package redistest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// EnvAddr names the environment variable that points Shared at a Redis the
// tests do not own, host:port of a single (non-cluster) server, whose
// database 0 they then use:
//
//	TOLLGATE_TEST_REDIS=127.0.0.1:6379 make test
//
// Unset, Shared starts a throwaway server of its own. Either way the tests
// keep their keys under Prefix and delete them.
const EnvAddr = "TOLLGATE_TEST_REDIS"

// The shared server of this test process.
var shared struct {
	mu       sync.Mutex
	resolved bool
	addr     string
	server   *Server // nil when the address came from EnvAddr
	dir      string  // the server's directory, removed by Run
	err      error
}

// running is set by Run, so that Shared can tell a package that forgot it.
var running atomic.Bool

// root starts every key prefix of this process: "tollgate-test:" and a
// random run ID, so that two runs sharing a Redis never meet.
var root = "tollgate-test:" + runID() + ":"

func runID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Run runs the tests of a package whose tests use Shared, then stops the
// shared server (by its PID) and removes its directory, and returns the
// exit code for os.Exit:
//
//	func TestMain(m *testing.M) { os.Exit(redistest.Run(m)) }
//
// Before it stops the server it checks that the tests left nothing behind.
// Keys under this run's prefixes that survived their test (a write that
// landed after the test's clean-up) are deleted and reported. On a server
// of its own, any other key means a test wrote outside Prefix and would
// leave it in the Redis of EnvAddr: Run reports it and fails the package.
func Run(m *testing.M) int {
	running.Store(true)
	code := m.Run()
	running.Store(false)

	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.resolved || shared.err != nil {
		return code
	}
	if late, err := Keys(shared.addr, root); err == nil && len(late) > 0 {
		fmt.Fprintf(os.Stderr, "redistest: deleting %d keys that outlived their test, such as %s\n", len(late), late[0])
	}
	if _, err := DeleteKeys(shared.addr, root); err != nil {
		fmt.Fprintf(os.Stderr, "redistest: cleaning up %s: %v\n", shared.addr, err)
	}
	if shared.server != nil {
		if left := leftovers(shared.addr); left != "" {
			fmt.Fprintf(os.Stderr, "redistest: keys written outside redistest.Prefix would stay in a shared Redis:\n%s\n", left)
			if code == 0 {
				code = 1
			}
		}
		shared.server.Kill()
		os.RemoveAll(shared.dir)
	}
	shared.resolved, shared.server = false, nil
	return code
}

// leftovers describes the keys of every database of a server of our own,
// or returns "" when there are none.
func leftovers(addr string) string {
	info, err := command(addr, keysTimeout, "INFO", "keyspace")
	if err != nil {
		return fmt.Sprintf("INFO keyspace: %v", err)
	}
	s, _ := info.(string)
	var dbs []string
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, "db") {
			dbs = append(dbs, strings.TrimSpace(line))
		}
	}
	if len(dbs) == 0 {
		return ""
	}
	out := strings.Join(dbs, "\n")
	if keys, err := Keys(addr, ""); err == nil && len(keys) > 0 {
		if len(keys) > 20 {
			keys = keys[:20]
		}
		out += "\nin db0: " + strings.Join(keys, " ")
	}
	return out
}

// Shared returns the address of the Redis that the tests of this process
// share: the one EnvAddr names, or else a throwaway redis-server started
// on first use and stopped by Run. The package's TestMain must call Run.
//
// Tests that share it must keep their keys under Prefix and change nothing
// else on the server (no FLUSHDB, SCRIPT FLUSH or CONFIG SET): it may be a
// developer's Redis. Anything else needs a server of its own (Start).
func Shared(tb testing.TB) string {
	tb.Helper()
	if !running.Load() {
		tb.Fatal("redistest.Shared needs the package's TestMain to call redistest.Run:\n\tfunc TestMain(m *testing.M) { os.Exit(redistest.Run(m)) }")
	}
	addr, err := SharedAddr()
	if err != nil {
		tb.Fatal(err)
	}
	return addr
}

// SharedAddr is Shared for code that has no test at hand, such as a
// TestMain before it calls Run. The server it starts is stopped by Run, so
// Run must follow.
func SharedAddr() (string, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.resolved {
		return shared.addr, shared.err
	}
	shared.resolved = true
	if addr := os.Getenv(EnvAddr); addr != "" {
		shared.addr = addr
		if err := ping(addr, 5*time.Second); err != nil {
			shared.err = fmt.Errorf("redistest: %s=%s does not answer PING: %w", EnvAddr, addr, err)
		}
		return shared.addr, shared.err
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		shared.err = err
		return "", err
	}
	s, err := startServer(dir, nil)
	if err != nil {
		os.RemoveAll(dir)
		shared.err = err
		return "", err
	}
	shared.addr, shared.server, shared.dir = s.Addr(), s, dir
	return shared.addr, nil
}

// started returns the shared address if it has been resolved.
func started() (string, bool) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	return shared.addr, shared.resolved && shared.err == nil
}

var prefixes atomic.Int64

// unsafeInName matches what a key prefix should not carry from a test's
// name: braces would make a Redis Cluster hash tag of it, and the rest is
// only noise in a key.
var unsafeInName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// Prefix returns a key prefix that no other test, in this run or another,
// shares, made of the run's ID, a counter and tb's name, such as
// "tollgate-test:1f2e3d4c5b6a:7:TestDenialCache:". When tb ends, every key
// under it is deleted from the shared Redis (SCAN, then UNLINK). It holds
// no braces, so it is a valid redisstore prefix.
func Prefix(tb testing.TB) string {
	tb.Helper()
	p := KeyPrefix(tb.Name())
	tb.Cleanup(func() {
		addr, ok := started()
		if !ok {
			return // nothing was written to it
		}
		if _, err := DeleteKeys(addr, p); err != nil {
			tb.Errorf("redistest: deleting the keys under %q: %v", p, err)
		}
	})
	return p
}

// KeyPrefix is Prefix for code that has no test at hand (an Example, a
// TestMain): it returns a unique prefix named after name, whose keys Run
// deletes at the end.
func KeyPrefix(name string) string {
	name = unsafeInName.ReplaceAllString(name, "_")
	if len(name) > 64 {
		name = name[:64]
	}
	return root + strconv.FormatInt(prefixes.Add(1), 10) + ":" + name + ":"
}
