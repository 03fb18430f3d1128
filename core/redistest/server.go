package redistest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startTimeout bounds how long a redis-server may take to answer PING after
// it starts; a loaded two-core machine under -race needs well under a second.
const startTimeout = 15 * time.Second

// stopTimeout is how long Stop waits for a SIGTERM before it sends SIGKILL.
const stopTimeout = 5 * time.Second

// errPortTaken says that the server could not listen on its port, which
// another process took between the check and the start.
var errPortTaken = errors.New("the port is taken")

// A Server is a redis-server process that a test owns. It listens on a
// loopback port of its own, keeps nothing on disk (--save "" --appendonly
// no, unless extra arguments say otherwise) and works in a temporary
// directory of its own. Start stops it by its PID when the test ends.
//
// A Server's methods are safe for concurrent use, so a test may kill or
// pause it from one goroutine while others send it commands.
type Server struct {
	bin  string
	port int
	dir  string
	args []string // extra arguments, after the defaults

	mu     sync.Mutex
	proc   *os.Process
	exited chan struct{} // closed when proc has been waited for
	paused bool
}

// Start starts a redis-server on a free loopback port, with extra
// command-line arguments after the defaults (for instance "--maxmemory",
// "1mb", or "--enable-debug-command", "yes"), and returns once it answers
// PING. The server is killed, by its PID, when tb ends.
//
// It fails tb, with what to do, if redis-server is not on PATH. Use a
// Server of one's own for anything that changes the server rather than a
// few keys: a kill, a restart, FLUSHDB, SCRIPT FLUSH, CONFIG SET, a
// replica or a cluster node.
func Start(tb testing.TB, extra ...string) *Server {
	tb.Helper()
	s, err := startServer(tb.TempDir(), extra)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Kill)
	return s
}

// Addr returns the server's address, 127.0.0.1:port. It stays the same
// across Restart.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the server's TCP port.
func (s *Server) Port() int { return s.port }

// Dir returns the server's working directory (--dir), where its log
// (redis.log) and, under a cluster, its nodes.conf are.
func (s *Server) Dir() string { return s.dir }

// PID returns the process ID of the running server, or 0 after Stop or
// Kill.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.Pid
}

// Log returns what the server has logged so far.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	return string(b)
}

// Kill stops the server at once with SIGKILL to its PID, as a crash would,
// and waits until the process is gone. It does nothing if the server is
// not running.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	_ = s.proc.Signal(syscall.SIGKILL) // a stopped (paused) process dies too
	<-s.exited
	s.proc, s.paused = nil, false
}

// Stop shuts the server down with SIGTERM, as an operator would, and
// waits until the process is gone (sending SIGKILL after 5 s). It does
// nothing if the server is not running.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	if s.paused {
		_ = resume(s.proc) // a stopped process would not see SIGTERM
	}
	_ = s.proc.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(stopTimeout):
		_ = s.proc.Signal(syscall.SIGKILL)
		<-s.exited
	}
	s.proc, s.paused = nil, false
}

// Restart starts the server again on the same port, directory and
// arguments, stopping it first (SIGTERM) if it runs, and returns once it
// answers PING. Without persistence it starts empty, as a Redis restarted
// without persistence does; a cluster node keeps its identity through
// nodes.conf. Unlike Start it returns its error, so that a goroutine other
// than the test's may call it.
func (s *Server) Restart() error {
	s.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.launch()
}

// Pause stops the process with SIGSTOP: connections stay open and
// commands are read by no one, as when a server stalls (a fork on a large
// heap, a swapped-out process). Resume undoes it.
func (s *Server) Pause() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.paused {
		return
	}
	if err := pause(s.proc); err == nil {
		s.paused = true
	}
}

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || !s.paused {
		return
	}
	if err := resume(s.proc); err == nil {
		s.paused = false
	}
}

// errNoServer is returned when redis-server is not on PATH.
var errNoServer = errors.New("redistest: redis-server is not on PATH. These tests start their own Redis: " +
	"install it (apt-get install redis-server; `make test` does it for you). " +
	"To use a Redis you run for the tests that can share one, set " + EnvAddr + "=127.0.0.1:6379")

// startServer starts a redis-server in dir on a free port, trying other
// ports if another process takes the chosen one first.
func startServer(dir string, extra []string) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errNoServer
	}
	for range 10 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &Server{bin: bin, port: port, dir: dir, args: extra}
		s.mu.Lock()
		err = s.launch()
		s.mu.Unlock()
		if !errors.Is(err, errPortTaken) {
			return s, err
		}
	}
	return nil, errors.New("redistest: no free loopback port after 10 tries")
}

// launch starts the process and waits until it answers; s.mu is held.
func (s *Server) launch() error {
	args := append([]string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no",
		"--dir", s.dir, "--logfile", "redis.log", "--daemonize", "no",
	}, s.args...)
	// Truncate the log, so that a failure is explained by this start's.
	_ = os.WriteFile(filepath.Join(s.dir, "redis.log"), nil, 0o644)
	var out strings.Builder // early errors (a bad argument) go to stdout
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = &lockedWriter{w: &out}, &lockedWriter{w: &out}
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redistest: starting redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.proc, s.exited, s.paused = cmd.Process, exited, false

	deadline := time.Now().Add(startTimeout)
	for {
		pid, err := serverPID(s.Addr(), 500*time.Millisecond)
		if err == nil && pid == cmd.Process.Pid {
			return nil
		}
		if err == nil {
			// Another process's server took the port between freePort and
			// the start (tests of other packages start theirs at the same
			// time): this one cannot listen, and must not be mistaken for
			// it.
			_ = cmd.Process.Kill()
			<-exited
			s.proc = nil
			return errPortTaken
		}
		select {
		case <-exited:
			s.proc = nil
			log := s.Log()
			if strings.Contains(log, "Address already in use") {
				return errPortTaken
			}
			return fmt.Errorf("redistest: redis-server %s exited at start:\n%s%s", strings.Join(args, " "), out.String(), tail(log))
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			s.proc = nil
			return fmt.Errorf("redistest: redis-server on %s did not answer within %v: %v\n%s", s.Addr(), startTimeout, err, tail(s.Log()))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// freePort returns a loopback port that is free now and whose cluster bus
// port (port + 10000) is free too. Both are below 32768, out of the range
// Linux hands out to outgoing connections, so that a client's ephemeral
// port does not take a server's between the check and the start.
func freePort() (int, error) {
	for range 200 {
		port := 10000 + rand.IntN(22768-10000)
		l1, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		l2, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		l1.Close()
		if err != nil {
			continue
		}
		l2.Close()
		return port, nil
	}
	return 0, errors.New("redistest: no free loopback port found")
}

// tail returns the last lines of a log, for an error message.
func tail(log string) string {
	lines := strings.Split(strings.TrimRight(log, "\n"), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}

// A lockedWriter lets the two output copiers of exec share one builder.
type lockedWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}
