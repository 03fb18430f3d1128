package docstest

import (
	"bufio"
	"fmt"
	"go/parser"
	"go/token"
	"maps"
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

// modulePrefix starts the path of every tollgate module.
const modulePrefix = "github.com/tollgate-go/tollgate/"

// TestProgramsBuildAlone copies every whole program of the docs, and the
// main.go of every example app, into a module of its own outside the
// workspace, as a user who copies it would, with a replace directive only
// for each tollgate module it imports (they have no release yet), then
// runs go mod tidy and go vet there: vet type-checks the program as go
// build would, without the link, the slow part. It fails when a program
// needs a tollgate module that it does not import, such as a test helper
// that a module it imports requires: go mod tidy would look for it in
// vain.
//
// The third-party modules a program imports start at the versions this
// module requires, and go.sum starts as this module's, so that with a warm
// module cache the check needs no network. The copies build without the
// race detector, whose cache make test (-race -short) leaves cold: with
// -short the check is left to make check.
func TestProgramsBuildAlone(t *testing.T) {
	if testing.Short() {
		t.Skip("the copies build without -race, from a cold cache under make test; make check runs it")
	}
	began := time.Now()
	var programs []snippet
	for _, s := range snippets(t) {
		if isProgram(s.code) {
			programs = append(programs, s)
		}
	}
	if len(programs) == 0 {
		t.Fatal("no whole programs found in the docs")
	}
	apps, err := filepath.Glob(filepath.Join(root, "examples", "*", "main.go"))
	if err != nil || len(apps) == 0 {
		t.Fatalf("no example apps found: %v", err)
	}
	for _, app := range apps {
		code, err := os.ReadFile(app)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, app)
		programs = append(programs, snippet{file: filepath.ToSlash(rel), line: 1, code: string(code)})
	}
	workspace, err := workspaceModules()
	if err != nil {
		t.Fatal(err)
	}
	own, err := readGoMod("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile("go.sum")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir() // outside the workspace: go.work is not found from there
	var wg sync.WaitGroup
	slots := make(chan struct{}, 4) // builds link large binaries: a few at a time
	for i, s := range programs {
		name := fmt.Sprintf("%s-%d", strings.TrimSuffix(filepath.Base(s.file), ".md"), s.line)
		if filepath.Base(s.file) == "main.go" {
			name = "example-" + filepath.Base(filepath.Dir(s.file))
		}
		mod := filepath.Join(dir, fmt.Sprintf("p%02d", i))
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			if err := buildAlone(mod, name, s.code, workspace, own.requires, sum); err != nil {
				t.Errorf("%s:%d: the program does not build alone: %v", s.file, s.line, err)
			}
		})
	}
	wg.Wait()
	t.Logf("%d programs built alone in %v", len(programs), time.Since(began).Round(100*time.Millisecond))
}

// buildAlone writes code as main.go of a new module in dir and checks that
// it builds, with the workspace off.
func buildAlone(dir, name, code string, workspace map[string]goMod, versions map[string]string, sum []byte) error {
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", code, parser.ImportsOnly)
	if err != nil {
		return err
	}
	var tollgate []string        // the tollgate modules it imports
	third := map[string]string{} // the other modules it imports, at this module's versions
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if m := longestPrefix(path, workspace); m != "" {
			if !slices.Contains(tollgate, m) {
				tollgate = append(tollgate, m)
			}
		} else if m := longestPrefix(path, versions); m != "" {
			third[m] = versions[m]
		}
	}
	// A module it imports may require a tollgate module that it does not
	// import: a copy would have no replace for it, and no release to find.
	var missing []string
	for _, m := range tollgate {
		for _, r := range workspace[m].tollgate {
			if !slices.Contains(tollgate, r) && !slices.Contains(missing, r) {
				missing = append(missing, r+" (required by "+m+")")
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("it would need %s, which it does not import", strings.Join(missing, ", "))
	}
	var gomod strings.Builder
	fmt.Fprintf(&gomod, "module example.com/%s\n\ngo 1.26\n", name)
	for _, m := range slices.Sorted(maps.Keys(third)) {
		fmt.Fprintf(&gomod, "\nrequire %s %s\n", m, third[m])
	}
	for _, m := range tollgate {
		fmt.Fprintf(&gomod, "\nrequire %s v0.0.0\nreplace %s => %s\n", m, m, workspace[m].dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for file, data := range map[string][]byte{"go.mod": []byte(gomod.String()), "go.sum": sum, "main.go": []byte(code)} {
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o644); err != nil {
			return err
		}
	}
	for _, args := range [][]string{{"mod", "tidy"}, {"vet", "."}} {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// longestPrefix returns the key of modules that is the longest module path
// holding the package path, or "".
func longestPrefix[V any](path string, modules map[string]V) string {
	best := ""
	for m := range modules {
		if (path == m || strings.HasPrefix(path, m+"/")) && len(m) > len(best) {
			best = m
		}
	}
	return best
}

// A goMod is what the check needs of a go.mod file.
type goMod struct {
	path     string
	dir      string
	requires map[string]string // every module it requires, with its version
	tollgate []string          // the tollgate modules among them
}

// workspaceModules reads the modules of go.work, by module path.
func workspaceModules() (map[string]goMod, error) {
	work, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return nil, err
	}
	modules := map[string]goMod{}
	for line := range strings.Lines(string(work)) {
		dir, ok := strings.CutPrefix(strings.TrimSpace(line), "./")
		if !ok {
			continue
		}
		m, err := readGoMod(filepath.Join(root, dir, "go.mod"))
		if err != nil {
			return nil, err
		}
		modules[m.path] = m
	}
	return modules, nil
}

// readGoMod reads the module path and the requirements of a go.mod file.
func readGoMod(file string) (goMod, error) {
	f, err := os.Open(file)
	if err != nil {
		return goMod{}, err
	}
	defer f.Close()
	dir, err := filepath.Abs(filepath.Dir(file))
	if err != nil {
		return goMod{}, err
	}
	m := goMod{dir: dir, requires: map[string]string{}}
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		fields := strings.Fields(strings.TrimPrefix(lines.Text(), "require "))
		switch {
		case len(fields) == 2 && fields[0] == "module":
			m.path = fields[1]
		case len(fields) >= 2 && strings.Contains(fields[0], ".") && strings.HasPrefix(fields[1], "v") && !slices.Contains(fields, "=>"):
			m.requires[fields[0]] = fields[1]
			if strings.HasPrefix(fields[0], modulePrefix) {
				m.tollgate = append(m.tollgate, fields[0])
			}
		}
	}
	return m, lines.Err()
}
