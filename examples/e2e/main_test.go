package e2e

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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

// modulePrefix starts the path of every tollgate module.
const modulePrefix = "github.com/tollgate-go/tollgate/"

var (
	root    string            // the repository
	bins    map[string]string // app binaries, by app
	builds  map[string]*build // how each app's copy was built
	cli     string            // the tollgate command
	cliErr  error
	workDir string
)

// A build is an app's main.go, copied alone into a module of its own.
type build struct {
	replaced   []string // the tollgate modules main.go imports
	transitive []string // and those they require in turn
	took       time.Duration
	err        error
}

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
	modules, err := workspaceModules()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Each app is built as a user who copied its main.go would build it:
	// alone in a module, outside the workspace. Those binaries are the
	// ones the tests run.
	bins, builds = map[string]string{}, map[string]*build{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	slots := make(chan struct{}, 3)
	for _, app := range apps {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			build := buildAlone
			if testing.Short() {
				// The copies take a minute to build from nothing;
				// make check builds them.
				build = buildInWorkspace
			}
			bin, b := build(app, modules)
			mu.Lock()
			defer mu.Unlock()
			builds[app] = b
			if b.err == nil {
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

// A module is a module of the workspace.
type module struct {
	dir      string
	requires []string // the tollgate modules its go.mod requires
}

// workspaceModules reads the modules of go.work, by path.
func workspaceModules() (map[string]module, error) {
	work, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return nil, err
	}
	modules := map[string]module{}
	for _, line := range strings.Split(string(work), "\n") {
		dir, ok := strings.CutPrefix(strings.TrimSpace(line), "./")
		if !ok {
			continue
		}
		dir = filepath.Join(root, dir)
		path, requires, err := readGoMod(filepath.Join(dir, "go.mod"))
		if err != nil {
			return nil, err
		}
		modules[path] = module{dir: dir, requires: requires}
	}
	return modules, nil
}

// readGoMod returns the module path of a go.mod file and the tollgate
// modules it requires.
func readGoMod(file string) (path string, requires []string, err error) {
	f, err := os.Open(file)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		fields := strings.Fields(strings.TrimPrefix(lines.Text(), "require "))
		switch {
		case len(fields) == 2 && fields[0] == "module":
			path = fields[1]
		case len(fields) >= 2 && strings.HasPrefix(fields[0], modulePrefix) && !slices.Contains(fields, "=>"):
			requires = append(requires, fields[0])
		}
	}
	return path, requires, lines.Err()
}

// buildAlone copies app's main.go into a new module that requires the
// tollgate modules it imports, replaced by their folders, and builds it
// outside the workspace, as a user who copies it would: replace directives
// for what it imports, and nothing else.
func buildAlone(app string, modules map[string]module) (string, *build) {
	began := time.Now()
	b := &build{}
	dir := filepath.Join(workDir, "copy-"+app)
	bin := filepath.Join(workDir, app)
	b.err = func() error {
		src, err := os.ReadFile(filepath.Join(root, "examples", app, "main.go"))
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), "main.go", src, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(path, modulePrefix+"examples") {
				return fmt.Errorf("main.go imports %s, which a copy can not", path)
			}
			if m := moduleOf(path, modules); m != "" && !slices.Contains(b.replaced, m) {
				b.replaced = append(b.replaced, m)
			}
		}
		for i := 0; i < len(b.replaced)+len(b.transitive); i++ {
			m := append(slices.Clone(b.replaced), b.transitive...)[i]
			for _, r := range modules[m].requires {
				if !slices.Contains(b.replaced, r) && !slices.Contains(b.transitive, r) {
					b.transitive = append(b.transitive, r)
				}
			}
		}
		if len(b.transitive) > 0 {
			return fmt.Errorf("the modules it imports require %s, which a copy would not find", strings.Join(b.transitive, ", "))
		}
		gomod := "module example.com/" + app + "\n\ngo 1.26\n"
		for _, path := range b.replaced {
			gomod += fmt.Sprintf("\nrequire %s v0.0.0\nreplace %s => %s\n", path, path, modules[path].dir)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "main.go"), src, 0o644); err != nil {
			return err
		}
		for _, args := range [][]string{{"mod", "tidy"}, {"build", "-ldflags=-s -w", "-o", bin, "."}} {
			cmd := exec.Command("go", args...)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
		return nil
	}()
	b.took = time.Since(began)
	return bin, b
}

// buildInWorkspace builds app in the workspace, as go run ./examples/app
// does, for the tests that run it; buildAlone checks more.
func buildInWorkspace(app string, _ map[string]module) (string, *build) {
	began := time.Now()
	bin := filepath.Join(workDir, app)
	cmd := exec.Command("go", "build", "-o", bin, "./examples/"+app)
	cmd.Dir = root
	b := &build{}
	if out, err := cmd.CombinedOutput(); err != nil {
		b.err = fmt.Errorf("go build ./examples/%s: %v\n%s", app, err, out)
	}
	b.took = time.Since(began)
	return bin, b
}

// moduleOf returns the workspace module that holds the package path, or "".
func moduleOf(path string, modules map[string]module) string {
	best := ""
	for m := range modules {
		if (path == m || strings.HasPrefix(path, m+"/")) && len(m) > len(best) {
			best = m
		}
	}
	return best
}

// TestExamplesBuildAlone reports how each app's main.go built when copied
// alone into a module of its own (TestMain builds them so, and the other
// tests run those binaries).
func TestExamplesBuildAlone(t *testing.T) {
	if testing.Short() {
		t.Skip("the copies are built by make check")
	}
	for _, app := range apps {
		b := builds[app]
		if b.err != nil {
			t.Errorf("%s: %v", app, b.err)
			continue
		}
		t.Logf("%s: built alone in %v, replacing %s", app, b.took.Round(100*time.Millisecond), strings.Join(b.replaced, ", "))
	}
}

// binary returns the binary of app, or fails the test if it did not build.
func binary(t *testing.T, app string) string {
	t.Helper()
	bin, ok := bins[app]
	if !ok {
		t.Fatalf("examples/%s did not build alone: see TestExamplesBuildAlone", app)
	}
	return bin
}

// withTimeout returns a context that ends after d, or with the test.
func withTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}
