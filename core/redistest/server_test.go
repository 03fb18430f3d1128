//go:build unix

package redistest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// alive reports whether a process with this PID exists.
func alive(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}

func TestStartKillRestart(t *testing.T) {
	s := Start(t)
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") || s.Port() == 6379 {
		t.Fatalf("Addr = %s, want a loopback port other than 6379", s.Addr())
	}
	pid := s.PID()
	if pid <= 0 || !alive(pid) {
		t.Fatalf("PID = %d, not a running process", pid)
	}
	do(t, s.Addr(), "SET", "k", "v")

	s.Kill()
	if alive(pid) {
		t.Fatalf("process %d still runs after Kill", pid)
	}
	if s.PID() != 0 {
		t.Errorf("PID = %d after Kill, want 0", s.PID())
	}
	if err := ping(s.Addr(), time.Second); err == nil {
		t.Fatal("PING answered after Kill")
	}

	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if s.PID() == pid || !alive(s.PID()) {
		t.Fatalf("PID after Restart = %d (was %d)", s.PID(), pid)
	}
	// Nothing on disk: a restart starts empty.
	if v := do(t, s.Addr(), "GET", "k"); v != nil {
		t.Errorf("GET k after Restart = %v, want nil: the server persisted data", v)
	}
}

// TestStartOnATakenPort: a server started on a port that another server
// took (another package's tests, between freePort and the start) fails
// with errPortTaken, so that Start tries another port, rather than pass
// the other server off as its own.
func TestStartOnATakenPort(t *testing.T) {
	other := Start(t, "--maxmemory", "1mb")
	s := &Server{bin: other.bin, port: other.Port(), dir: t.TempDir()}
	s.mu.Lock()
	err := s.launch()
	s.mu.Unlock()
	if !errors.Is(err, errPortTaken) || s.PID() != 0 {
		t.Fatalf("a start on a taken port: %v, PID %d; want errPortTaken and no process", err, s.PID())
	}
	if v := do(t, other.Addr(), "CONFIG", "GET", "maxmemory"); !strings.Contains(fmt.Sprint(v), "1048576") {
		t.Errorf("the other server's maxmemory = %v, want it untouched", v)
	}
}

func TestStop(t *testing.T) {
	s := Start(t)
	pid := s.PID()
	s.Stop()
	if alive(pid) {
		t.Fatalf("process %d still runs after Stop", pid)
	}
	if !strings.Contains(s.Log(), "ready to exit") {
		t.Errorf("no orderly shutdown in the log:\n%s", s.Log())
	}
	s.Stop() // a second Stop does nothing
	s.Kill()
}

func TestPauseResume(t *testing.T) {
	s := Start(t)
	s.Pause()
	err := ping(s.Addr(), 300*time.Millisecond)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("PING to a paused server: %v, want a timeout", err)
	}
	s.Resume()
	if err := ping(s.Addr(), 5*time.Second); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}
	s.Pause()
	s.Stop() // a paused server stops too
	if s.PID() != 0 {
		t.Fatal("a paused server did not stop")
	}
}

// TestCleanupKillsTheServer checks that a test's servers are gone when the
// test is, paused ones included.
func TestCleanupKillsTheServer(t *testing.T) {
	var pids []int
	var addrs []string
	t.Run("owner", func(t *testing.T) {
		for i := range 2 {
			s := Start(t)
			pids, addrs = append(pids, s.PID()), append(addrs, s.Addr())
			if i == 1 {
				s.Pause()
			}
		}
	})
	for i, pid := range pids {
		if alive(pid) {
			t.Errorf("redis-server %d (%s) outlived its test", pid, addrs[i])
		}
		if c, err := net.DialTimeout("tcp", addrs[i], time.Second); err == nil {
			c.Close()
			t.Errorf("%s still accepts connections", addrs[i])
		}
	}
}

func TestStartArguments(t *testing.T) {
	s := Start(t, "--maxmemory", "1mb", "--maxmemory-policy", "noeviction")
	config := func(name string) string {
		r, _ := do(t, s.Addr(), "CONFIG", "GET", name).([]any)
		if len(r) != 2 {
			t.Fatalf("CONFIG GET %s = %v", name, r)
		}
		return r[1].(string)
	}
	for name, want := range map[string]string{
		"maxmemory": "1048576", "maxmemory-policy": "noeviction", // the extra arguments
		"save": "", "appendonly": "no", "bind": "127.0.0.1", // the defaults
	} {
		if got := config(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if dir := config("dir"); dir != s.Dir() {
		t.Errorf("dir = %q, want the server's own %q", dir, s.Dir())
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), "redis.log")); err != nil {
		t.Errorf("no log in the server's directory: %v", err)
	}
}

func TestStartReportsABadArgument(t *testing.T) {
	_, err := startServer(t.TempDir(), []string{"--no-such-option", "1"})
	if err == nil || !strings.Contains(err.Error(), "no-such-option") {
		t.Fatalf("err = %v, want redis-server's complaint about the option", err)
	}
}

func TestStartCluster(t *testing.T) {
	nodes := StartCluster(t, 3)
	for _, n := range nodes {
		slots, _ := do(t, n.Addr(), "CLUSTER", "SLOTS").([]any)
		covered := 0
		for _, r := range slots {
			r := r.([]any)
			covered += int(r[1].(int64)-r[0].(int64)) + 1
		}
		if len(slots) != 3 || covered != clusterSlots {
			t.Errorf("%s: %d slot ranges covering %d slots, want 3 covering %d", n.Addr(), len(slots), covered, clusterSlots)
		}
	}
	if got := Addrs(nodes); len(got) != 3 || got[0] != nodes[0].Addr() {
		t.Errorf("Addrs = %v", got)
	}
}

// A helper process runs one of these as its only test, under Run, with the
// environment the parent gives it.
const helperEnv = "TESTREDIS_HELPER"

func TestHelperProcess(t *testing.T) {
	switch os.Getenv(helperEnv) {
	case "":
		t.Skip("run by other tests in a process of its own")
	case "write-under-prefixes":
		addr := Shared(t)
		do(t, addr, "SET", Prefix(t)+"a", "1")
		do(t, addr, "SET", KeyPrefix("late")+"b", "1") // deleted by Run only
	case "write-outside-prefixes":
		do(t, Shared(t), "SET", "stray-key", "1")
	case "start":
		Start(t)
	}
}

// helper runs TestHelperProcess in a new process with mode and env.
func helper(t *testing.T, mode string, env ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), append([]string{helperEnv + "=" + mode}, env...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestExternalServerKeepsNoKeys(t *testing.T) {
	s := Start(t)
	out, err := helper(t, "write-under-prefixes", EnvAddr+"="+s.Addr())
	if err != nil {
		t.Fatalf("helper failed: %v\n%s", err, out)
	}
	if n := do(t, s.Addr(), "DBSIZE"); n != int64(0) {
		t.Errorf("DBSIZE = %v after the run, want 0\n%s", n, out)
	}
	if !strings.Contains(out, "deleting 1 keys that outlived their test, such as tollgate-test:") || !strings.Contains(out, ":late:b") {
		t.Errorf("Run did not report the key it deleted:\n%s", out)
	}
}

func TestExternalServerMustAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	out, err := helper(t, "write-under-prefixes", EnvAddr+"="+dead)
	if err == nil || !strings.Contains(out, EnvAddr+"="+dead+" does not answer") {
		t.Fatalf("err = %v, want a failure naming %s\n%s", err, EnvAddr, out)
	}
}

func TestRunFailsOnKeysOutsidePrefixes(t *testing.T) {
	out, err := helper(t, "write-outside-prefixes", EnvAddr+"=")
	if err == nil {
		t.Fatalf("a run that left a key outside its prefixes passed:\n%s", out)
	}
	if !strings.Contains(out, "stray-key") {
		t.Errorf("the failure does not name the key:\n%s", out)
	}
}

func TestNoRedisServer(t *testing.T) {
	out, err := helper(t, "start", "PATH="+t.TempDir())
	if err == nil {
		t.Fatalf("Start passed without redis-server on PATH:\n%s", out)
	}
	if !strings.Contains(out, "redis-server is not on PATH") || !strings.Contains(out, "apt-get install redis-server") {
		t.Errorf("the failure does not say what to do:\n%s", out)
	}
}
