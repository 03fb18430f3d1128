package docstest

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// A snippet is one ```go block of a Markdown file.
type snippet struct {
	file string // relative to the repository's root
	line int    // of the block's first line of code
	code string
}

// root is the repository's root, two levels up.
const root = "../.."

func snippets(t *testing.T) []snippet {
	t.Helper()
	var files []string
	for _, pattern := range []string{"*.md", "docs/*.md", "docs/getting-started/*.md", "*/README.md", "*/*/README.md"} {
		found, _ := filepath.Glob(filepath.Join(root, filepath.FromSlash(pattern)))
		files = append(files, found...)
	}
	var out []snippet
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		lines := strings.Split(string(b), "\n")
		for i := 0; i < len(lines); i++ {
			if strings.TrimSpace(lines[i]) != "```go" {
				continue
			}
			start := i + 1
			for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			}
			out = append(out, snippet{file: rel, line: start + 1, code: strings.Join(lines[start:i], "\n")})
		}
	}
	return out
}

// imports maps the package names that snippets use to their paths.
var imports = map[string]string{
	"tollgate":        "github.com/tollgate-go/tollgate/core",
	"memory":          "github.com/tollgate-go/tollgate/core/memory",
	"redisstore":      "github.com/tollgate-go/tollgate/core/redisstore",
	"tollgatehttp":    "github.com/tollgate-go/tollgate/core/tollgatehttp",
	"tollgategin":     "github.com/tollgate-go/tollgate/gin",
	"tollgateecho":    "github.com/tollgate-go/tollgate/echo",
	"tollgateechov5":  "github.com/tollgate-go/tollgate/echov5",
	"tollgatechi":     "github.com/tollgate-go/tollgate/chi",
	"tollgatefiber":   "github.com/tollgate-go/tollgate/fiber",
	"tollgatefiberv3": "github.com/tollgate-go/tollgate/fiberv3",
	"tollgategrpc":    "github.com/tollgate-go/tollgate/grpc",
	"tollgateprom":    "github.com/tollgate-go/tollgate/prometheus",
	"tollgateotel":    "github.com/tollgate-go/tollgate/otel",
	"insights":        "github.com/tollgate-go/tollgate/insights",
	"admin":           "github.com/tollgate-go/tollgate/admin",
	"gin":             "github.com/gin-gonic/gin",
	"echo":            "github.com/labstack/echo/v4",
	"echov5":          "github.com/labstack/echo/v5",
	"fiberv3":         "github.com/gofiber/fiber/v3",
	"chi":             "github.com/go-chi/chi/v5",
	"fiber":           "github.com/gofiber/fiber/v2",
	"grpc":            "google.golang.org/grpc",
	"redis":           "github.com/redis/go-redis/v9",
	"prometheus":      "github.com/prometheus/client_golang/prometheus",
	"promhttp":        "github.com/prometheus/client_golang/prometheus/promhttp",
	"context":         "context",
	"errors":          "errors",
	"fmt":             "fmt",
	"log":             "log",
	"slog":            "log/slog",
	"http":            "net/http",
	"netip":           "net/netip",
	"os":              "os",
	"time":            "time",
	"strings":         "strings",
	"strconv":         "strconv",
	"json":            "encoding/json",
	"sql":             "database/sql",
	"expvar":          "expvar",
}

// preamble declares what fragments take for granted: a Limiter, a store,
// plans, a Redis client, the key under which authentication keeps the
// tenant, and, for the framework the fragment uses, a router, handlers
// named hello, createReport, export and login, and the application's
// authentication middleware, named authenticate.
const preamble = `
var (
	limiter *tollgate.Limiter
	store   tollgate.Store
	plans   tollgate.PlanResolver
	client  *redis.Client
	ctx     = context.Background()
	logger  = slog.Default()
)

type tenantKey struct{}
`

// frameworks gives, by the adapter package a fragment uses, the router,
// handlers and authentication it takes for granted.
var frameworks = []struct{ pkg, decls string }{
	{"tollgategin", "var r = gin.New()\nvar hello, createReport, export, login, authenticate gin.HandlerFunc\n"},
	{"tollgateechov5", "var e = echov5.New()\nvar hello, createReport, export, login echov5.HandlerFunc\nvar authenticate echov5.MiddlewareFunc\n"},
	{"tollgateecho", "var e = echo.New()\nvar hello, createReport, export, login echo.HandlerFunc\nvar authenticate echo.MiddlewareFunc\n"},
	{"tollgatefiberv3", "var app = fiberv3.New()\nvar hello, createReport, export, login, authenticate fiberv3.Handler\n"},
	{"tollgatefiber", "var app = fiber.New()\nvar hello, createReport, export, login, authenticate fiber.Handler\n"},
	{"tollgatechi", "var r = chi.NewRouter()\nvar hello, createReport, export, login http.HandlerFunc\nvar authenticate func(http.Handler) http.Handler\n"},
	{"tollgategrpc", "var authenticate grpc.UnaryServerInterceptor\nvar authenticateStream grpc.StreamServerInterceptor\n"},
	{"", "var mux = http.NewServeMux()\nvar hello, createReport, export, login http.Handler\nvar authenticate func(http.Handler) http.Handler\n"},
}

// declsFor returns the declarations of the framework code uses.
func declsFor(code string) string {
	for _, f := range frameworks {
		if f.pkg == "" || strings.Contains(code, f.pkg+".") {
			return f.decls
		}
	}
	return ""
}

// TestSnippetsCompile builds every ```go block of the README, the docs, the
// getting-started pages and the modules' READMEs: a whole program as it is,
// a fragment inside a function beside the preamble's declarations.
// Variables a fragment declares and leaves unused are used, as a longer
// program would.
func TestSnippetsCompile(t *testing.T) {
	all := snippets(t)
	if len(all) == 0 {
		t.Fatal("no snippets found")
	}
	dir, err := os.MkdirTemp(".", "snippets-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for i, s := range all {
		src, err := program(s)
		if err != nil {
			t.Errorf("%s:%d: %v", s.file, s.line, err)
			continue
		}
		pkg := filepath.Join(dir, fmt.Sprintf("s%03d", i))
		os.MkdirAll(pkg, 0o755)
		if err := os.WriteFile(filepath.Join(pkg, "main.go"), src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "vet", "./"+filepath.Base(dir)+"/...")
	out, err := cmd.CombinedOutput()
	if err == nil {
		return
	}
	// Map each error back to its snippet.
	re := regexp.MustCompile(`s(\d{3})/main.go:(\d+)`)
	for _, line := range strings.Split(string(out), "\n") {
		m := re.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		i, _ := strconv.Atoi(m[1]) // not Sscan: "034" would be octal
		t.Errorf("%s:%d: %s\n%s", all[i].file, all[i].line, line, all[i].code)
	}
	if !t.Failed() {
		t.Fatalf("go vet: %v\n%s", err, out)
	}
}

// program returns a compilable file for s.
func program(s snippet) ([]byte, error) {
	if isProgram(s.code) {
		return []byte(s.code), nil
	}
	code, own := splitImports(s.code)
	s.code = code
	decls := preamble + declsFor(s.code)
	body := "func _() {\n" + s.code + "\n}\n"
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "", "package p\n"+decls+body, 0)
	if err != nil {
		// Declarations rather than statements: at file level.
		body = s.code + "\n"
		if f, err = parser.ParseFile(fset, "", "package p\n"+decls+body, 0); err != nil {
			return nil, err
		}
	} else {
		body = "func _() {\n" + s.code + "\n" + uses(f) + "}\n"
	}
	used := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok {
				used[id.Name] = true
			}
		}
		return true
	})
	paths := map[string]string{}
	for name, path := range imports {
		if used[name] {
			paths[name] = path
		}
	}
	for name, path := range own {
		if used[name] {
			paths[name] = path
		}
	}
	names := slices.Sorted(maps.Keys(paths))
	var b bytes.Buffer
	b.WriteString("package main\n\nimport (\n")
	for _, n := range names {
		fmt.Fprintf(&b, "\t%s %q\n", n, paths[n])
	}
	b.WriteString(")\n\nfunc main() {}\n")
	b.WriteString(decls)
	b.WriteString(body)
	return b.Bytes(), nil
}

// isProgram reports whether code is a whole program: a file whose package
// clause, after any comments, is package main.
func isProgram(code string) bool {
	f, err := parser.ParseFile(token.NewFileSet(), "", code, parser.PackageClauseOnly)
	return err == nil && f.Name.Name == "main"
}

// importLine is one import of a fragment: an optional name and a path.
var importLine = regexp.MustCompile(`^\s*(?:import\s+)?(\w+\s+)?"([^"]+)"\s*(//.*)?$`)

// splitImports takes the imports a fragment shows at its top out of its
// code, and returns them by package name.
func splitImports(code string) (string, map[string]string) {
	own := map[string]string{}
	lines := strings.Split(code, "\n")
	i, inBlock := 0, false
	for ; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		switch {
		case l == "" || strings.HasPrefix(l, "//"):
		case l == "import (":
			inBlock = true
		case inBlock && l == ")":
			inBlock = false
		case inBlock || strings.HasPrefix(l, "import "):
			m := importLine.FindStringSubmatch(l)
			if m == nil {
				return code, own
			}
			name := strings.TrimSpace(m[1])
			if name == "" {
				name = packageName(m[2])
			}
			own[name] = m[2]
		default:
			return strings.Join(lines[i:], "\n"), own
		}
	}
	return "", own
}

// packageName returns the name a package of path usually has: its last
// element, or the one before a major version ("github.com/labstack/echo/v5"
// is package echo).
func packageName(path string) string {
	elems := strings.Split(path, "/")
	name := elems[len(elems)-1]
	if len(elems) > 1 && majorVersion.MatchString(name) {
		name = elems[len(elems)-2]
	}
	return name
}

var majorVersion = regexp.MustCompile(`^v[0-9]+$`)

// uses returns statements that use every variable the fragment declares
// with := or var, so that leaving one unused is no error.
func uses(f *ast.File) string {
	var fn *ast.FuncDecl
	for _, d := range f.Decls {
		if d, ok := d.(*ast.FuncDecl); ok && d.Name.Name == "_" {
			fn = d
		}
	}
	var b strings.Builder
	seen := map[string]bool{}
	add := func(id *ast.Ident) {
		if id.Name != "_" && !seen[id.Name] {
			seen[id.Name] = true
			fmt.Fprintf(&b, "\t_ = %s\n", id.Name)
		}
	}
	for _, st := range fn.Body.List {
		switch st := st.(type) {
		case *ast.AssignStmt:
			if st.Tok == token.DEFINE {
				for _, l := range st.Lhs {
					if id, ok := l.(*ast.Ident); ok {
						add(id)
					}
				}
			}
		case *ast.DeclStmt:
			if g, ok := st.Decl.(*ast.GenDecl); ok {
				for _, sp := range g.Specs {
					if vs, ok := sp.(*ast.ValueSpec); ok {
						for _, id := range vs.Names {
							add(id)
						}
					}
				}
			}
		}
	}
	return b.String()
}

// TestPagesStayShort holds the README and docs/performance.md to the
// lengths a reader gets through: the README says what tollgate is and how
// to use it, the performance page gives current results and how to rerun
// them. Runs, profiles and their analyses go to bench/results.
func TestPagesStayShort(t *testing.T) {
	for file, most := range map[string]int{"README.md": 150, "docs/performance.md": 200} {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
		if err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(b, []byte("\n")); n > most {
			t.Errorf("%s has %d lines, want at most %d", file, n, most)
		}
	}
}
