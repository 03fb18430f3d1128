package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// apps are the example apps, by directory; httpApps those that serve the
// example API with a web framework.
var (
	apps     = []string{"gin", "echo", "echov5", "chi", "fiber", "fiberv3", "grpc", "replicas", "worker", "client"}
	httpApps = []string{"gin", "echo", "echov5", "chi", "fiber", "fiberv3"}
)

var (
	root    string            // the repository
	bins    map[string]string // app binaries, by app
	errs    map[string]error  // why an app did not build, by app
	cli     string            // the tollgate command
	cliErr  error
	workDir string
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	// The tests spend their time waiting on the apps, not on the CPUs: run
	// up to 12 at once unless -parallel says otherwise, rather than
	// GOMAXPROCS.
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", "12"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	root = filepath.Join(wd, "..", "..")
	if workDir, err = os.MkdirTemp("", "tollgate-examples-e2e-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(workDir)
	// The apps are built in the workspace, as go run ./examples/app
	// does; internal/docstest checks that each main.go, copied alone
	// into a module of its own, builds too.
	bins, errs = map[string]string{}, map[string]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	slots := make(chan struct{}, 3)
	for _, app := range apps {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			bin, err := buildInWorkspace(app)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[app] = err
			} else {
				bins[app] = bin
			}
		})
	}
	wg.Go(func() {
		// The CLI as its README builds it: from the repository root.
		cli = filepath.Join(workDir, "tollgate")
		cmd := exec.Command("go", "build", "-o", cli, "./cmd/tollgate")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			cliErr = fmt.Errorf("go build ./cmd/tollgate: %v\n%s", err, out)
		}
	})
	wg.Wait()
	return m.Run()
}

// buildInWorkspace builds app in the workspace, as go run ./examples/app
// does.
func buildInWorkspace(app string) (string, error) {
	bin := filepath.Join(workDir, app)
	cmd := exec.Command("go", "build", "-o", bin, "./examples/"+app)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./examples/%s: %v\n%s", app, err, out)
	}
	return bin, nil
}

// binary returns the binary of app, or fails the test if it did not build.
func binary(t *testing.T, app string) string {
	t.Helper()
	bin, ok := bins[app]
	if !ok {
		t.Fatalf("examples/%s did not build: %v", app, errs[app])
	}
	return bin
}

// withTimeout returns a context that ends after d, or with the test.
func withTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}
