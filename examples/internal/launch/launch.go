// Package launch builds the example apps and runs them as child processes on
// loopback ports, for the replicas and client demos and the end-to-end
// tests.
//
// An app is started with ADDR=127.0.0.1:0, so the kernel picks a free port
// and no two apps race for one; Start reads the address from the app's
// "listening" log line and waits until /healthz answers.
package launch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/tollgate-go/tollgate/examples/internal/demo"
)

// Module is the import path of the examples module.
const Module = "github.com/tollgate-go/tollgate/examples"

// Frameworks lists the example apps, by directory name.
var Frameworks = []string{"gin", "echo", "chi", "fiber", "echov5", "fiberv3"}

// Build compiles the example apps named by fws (directory names such as
// "gin") into dir and returns the path of each binary by name. It runs the
// go command in the examples module when it can find its source, so that it
// works from anywhere in the repository.
func Build(ctx context.Context, dir string, fws ...string) (map[string]string, error) {
	args := []string{"build", "-o", dir + string(os.PathSeparator)}
	bins := make(map[string]string, len(fws))
	for _, fw := range fws {
		args = append(args, Module+"/"+fw)
		bins[fw] = filepath.Join(dir, fw+exeSuffix())
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = moduleDir()
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return bins, nil
}

func exeSuffix() string {
	if runtime.GOOS == "windows" {
		return ".exe"
	}
	return ""
}

// moduleDir returns the examples module's directory when this file's source
// is where it was compiled from (go run, go test), and "" (the current
// directory) otherwise.
func moduleDir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return ""
	}
	dir := filepath.Join(filepath.Dir(file), "..", "..")
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return ""
	}
	return dir
}

// An App is an example app running as a child process.
type App struct {
	Name string // the binary's base name
	Addr string // host:port it listens on
	URL  string // http://Addr

	cmd    *exec.Cmd
	out    *output
	exited chan struct{}
	err    error // from Wait, once exited is closed
}

// ReadyTimeout bounds how long Start waits for an app to listen. It is
// generous: a loaded CI machine can take seconds to start a process.
var ReadyTimeout = 30 * time.Second

// Start runs the app binary bin with the environment of this process less
// ADDR and REDIS_URL, plus ADDR=127.0.0.1:0, plus env ("KEY=value"; a
// REDIS_URL here selects the Redis store). It returns once the app answers
// GET /healthz, or with an error that includes the app's output.
func Start(ctx context.Context, bin string, env ...string) (*App, error) {
	cmd := exec.Command(bin)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ADDR=") && !strings.HasPrefix(kv, "REDIS_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "ADDR=127.0.0.1:0")
	cmd.Env = append(cmd.Env, env...)
	out := newOutput()
	cmd.Stdout, cmd.Stderr = out, out
	setProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	a := &App{Name: filepath.Base(bin), cmd: cmd, out: out, exited: make(chan struct{})}
	go func() {
		a.err = cmd.Wait()
		close(a.exited)
	}()

	ctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	line, err := a.waitLine(ctx, func(m map[string]any) bool { return m["msg"] == demo.ListeningMsg })
	if err != nil {
		_ = a.Stop()
		return nil, fmt.Errorf("%s did not start listening: %w\n%s", a.Name, err, out.String())
	}
	a.Addr, _ = line["addr"].(string)
	a.URL = "http://" + a.Addr
	if err := a.waitHealthy(ctx); err != nil {
		_ = a.Stop()
		return nil, fmt.Errorf("%s at %s is not healthy: %w\n%s", a.Name, a.Addr, err, out.String())
	}
	return a, nil
}

func (a *App) waitHealthy(ctx context.Context) error {
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.URL+"/healthz", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET /healthz: %s", resp.Status)
		}
		select {
		case <-ctx.Done():
			return err
		case <-a.exited:
			return fmt.Errorf("exited: %v", a.err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Command returns a command that runs name with args, as Start runs an
// app: on Linux the kernel kills its process if this one dies first, and
// the process is killed (by its own PID) when ctx is done. The worker demo
// runs its worker processes with it.
func Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	setProcAttr(cmd)
	return cmd
}

// PID returns the app's process ID.
func (a *App) PID() int { return a.cmd.Process.Pid }

// Stop asks the app to shut down (SIGTERM; on Windows it is killed) and
// waits for it, killing it if it has not exited after 10 seconds. It
// signals the app's own process ID only, and is safe to call more than once.
func (a *App) Stop() error {
	select {
	case <-a.exited:
		return nil
	default:
	}
	if err := terminate(a.cmd.Process); err != nil {
		_ = a.cmd.Process.Kill()
	}
	select {
	case <-a.exited:
	case <-time.After(10 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.exited
	}
	return nil
}

// Output returns everything the app has written to stdout and stderr.
func (a *App) Output() string { return a.out.String() }

// WaitLog waits until the app writes a JSON log line for which match
// returns true, and returns it decoded. Lines that are not JSON are skipped.
func (a *App) WaitLog(ctx context.Context, match func(line map[string]any) bool) (map[string]any, error) {
	return a.waitLine(ctx, match)
}

func (a *App) waitLine(ctx context.Context, match func(map[string]any) bool) (map[string]any, error) {
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
			// The last lines may have arrived with the exit.
			if lines, _ := a.out.linesFrom(seen); len(lines) > 0 {
				continue
			}
			return nil, fmt.Errorf("%s exited: %v", a.Name, a.err)
		}
	}
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

func newOutput() *output { return &output{changed: make(chan struct{})} }

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf.Write(p)
	o.partial = append(o.partial, p...)
	added := false
	for {
		i := bytes.IndexByte(o.partial, '\n')
		if i < 0 {
			break
		}
		o.lines = append(o.lines, string(o.partial[:i]))
		o.partial = o.partial[i+1:]
		added = true
	}
	if added {
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
