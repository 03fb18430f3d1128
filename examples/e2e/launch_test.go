package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// An app is an example app running as a child process of the test.
type app struct {
	name string
	addr string // host:port it listens on
	url  string // http://addr

	cmd    *exec.Cmd
	out    *output
	exited chan struct{}
	err    error // from Wait, once exited is closed
}

// startTimeout bounds how long an app may take to listen and answer
// /healthz: generous, for a loaded machine.
const startTimeout = 30 * time.Second

// start runs app name with ADDR=127.0.0.1:0, this process's environment
// less the apps' own variables, env ("KEY=value") and args, and returns
// once it answers GET /healthz. It stops the app, by its PID, when the test
// ends; a failed test logs the app's output.
func start(t *testing.T, name string, env []string, args ...string) *app {
	t.Helper()
	a := launch(t, name, env, args...)
	ctx := withTimeout(t, startTimeout)
	line, err := a.waitLog(ctx, func(m map[string]any) bool { return m["msg"] == "listening" })
	if err != nil {
		t.Fatalf("%s did not start listening: %v\n%s", name, err, a.out)
	}
	a.addr, _ = line["addr"].(string)
	a.url = "http://" + a.addr
	for {
		resp, err := http.Get(a.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return a
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s at %s is not healthy: %v\n%s", name, a.addr, err, a.out)
		case <-a.exited:
			t.Fatalf("%s exited: %v\n%s", name, a.err, a.out)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// launch starts app name as start does, without waiting for it.
func launch(t *testing.T, name string, env []string, args ...string) *app {
	t.Helper()
	cmd := exec.Command(binary(t, name), args...)
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !strings.Contains(" ADDR REDIS_URL ADMIN_TOKEN SHADOW ", " "+k+" ") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(append(cmd.Env, "ADDR=127.0.0.1:0"), env...)
	a := &app{name: name, cmd: cmd, out: &output{changed: make(chan struct{})}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = a.out, a.out
	// The kernel kills the app if the test binary dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		a.err = cmd.Wait()
		close(a.exited)
	}()
	t.Cleanup(func() {
		a.stop()
		if t.Failed() {
			t.Logf("output of %s (pid %d):\n%s", name, cmd.Process.Pid, a.out)
		}
	})
	return a
}

// stop asks the app to shut down (SIGTERM to its own PID) and waits for
// it, killing it after 10 seconds.
func (a *app) stop() error {
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(10 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.exited
	}
	return a.err
}

// wait waits for the app to exit by itself, and returns how it exited.
func (a *app) wait(ctx context.Context) error {
	select {
	case <-a.exited:
		return a.err
	case <-ctx.Done():
		return fmt.Errorf("%s still runs: %w", a.name, ctx.Err())
	}
}

// waitLog waits until the app writes a JSON log line for which match
// returns true, and returns it decoded.
func (a *app) waitLog(ctx context.Context, match func(line map[string]any) bool) (map[string]any, error) {
	seen := 0
	for {
		lines, changed := a.out.linesFrom(seen)
		seen += len(lines)
		for _, l := range lines {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && match(m) {
				return m, nil
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-a.exited:
			if lines, _ := a.out.linesFrom(seen); len(lines) > 0 {
				continue // the last lines came with the exit
			}
			return nil, fmt.Errorf("%s exited: %v", a.name, a.err)
		}
	}
}

// logs returns the app's JSON log lines that match.
func (a *app) logs(match func(line map[string]any) bool) []map[string]any {
	lines, _ := a.out.linesFrom(0)
	var found []map[string]any
	for _, l := range lines {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && match(m) {
			found = append(found, m)
		}
	}
	return found
}

// output collects a process's output and splits it into lines that
// waiters can follow.
type output struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	lines   []string
	partial []byte
	changed chan struct{} // closed and replaced on every new line
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf.Write(p)
	o.partial = append(o.partial, p...)
	for {
		i := bytes.IndexByte(o.partial, '\n')
		if i < 0 {
			break
		}
		o.lines = append(o.lines, string(o.partial[:i]))
		o.partial = o.partial[i+1:]
		close(o.changed)
		o.changed = make(chan struct{})
	}
	return len(p), nil
}

// linesFrom returns the complete lines from index i on, and a channel that
// is closed when more arrive.
func (o *output) linesFrom(i int) ([]string, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.lines[min(i, len(o.lines)):]...), o.changed
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}
