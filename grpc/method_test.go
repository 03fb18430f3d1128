package tollgategrpc

import (
	"strings"
	"testing"
)

func TestValidMethodKey(t *testing.T) {
	for k, want := range map[string]bool{
		"/reports.v1.Reports/Export": true,
		"/reports.v1.Reports/":       true,
		"reports.v1.Reports/Export":  false,
		"/reports.v1.Reports":        false,
		"//Export":                   false,
		"/a/b/c":                     false,
		"/":                          false,
		"":                           false,
	} {
		if got := validMethodKey(k); got != want {
			t.Errorf("validMethodKey(%q) = %v, want %v", k, got, want)
		}
	}
}

func TestLookupMethod(t *testing.T) {
	m := map[string]int{"/s.S/": 1, "/s.S/M": 2}
	for method, want := range map[string]int{"/s.S/M": 2, "/s.S/N": 1, "/t.T/M": 0, "": 0, "/": 0, "x": 0} {
		if got, _ := lookupMethod(m, method); got != want {
			t.Errorf("lookupMethod(%q) = %d, want %d", method, got, want)
		}
	}
}

// FuzzMethodKeys checks that no key or method name makes the lookups panic,
// and that a valid key is found for the methods it names.
func FuzzMethodKeys(f *testing.F) {
	for _, s := range []string{"/a.B/C", "/a.B/", "", "/", "//", "/a/b/c", "\xff/\x00/"} {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, key, method string) {
		m := map[string]bool{key: true}
		_, _ = lookupMethod(m, method)
		if !validMethodKey(key) {
			return
		}
		if strings.Count(key, "/") != 2 || key[0] != '/' {
			t.Fatalf("validMethodKey(%q) is true", key)
		}
		full := key
		if strings.HasSuffix(key, "/") {
			full = key + "Method"
		}
		if _, ok := lookupMethod(m, full); !ok {
			t.Fatalf("key %q does not find %q", key, full)
		}
	})
}
