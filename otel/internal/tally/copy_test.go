package tally

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// The package is a copy of prometheus/internal/tally (go generate in otel/
// makes it), so that both exporters count alike. In the repository, where
// the source is at hand, the copy must be exact.
func TestCopyIsCurrent(t *testing.T) {
	src := filepath.Join("..", "..", "..", "prometheus", "internal", "tally")
	want, err := filepath.Glob(filepath.Join(src, "*.go"))
	if err != nil || len(want) == 0 {
		t.Skipf("no source at %s (a module download): nothing to compare", src)
	}
	for _, path := range want {
		name := filepath.Base(path)
		if filepath.Ext(name) == ".go" && len(name) > 8 && name[len(name)-8:] == "_test.go" {
			continue
		}
		orig, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		copied, err := os.ReadFile(name)
		if err != nil || !bytes.Equal(orig, copied) {
			t.Errorf("%s differs from %s: run go generate in otel/", name, path)
		}
	}
}
