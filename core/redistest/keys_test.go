package redistest

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestPrefixDeletesItsKeys(t *testing.T) {
	addr := Shared(t)
	var prefix string
	t.Run("writer {braces} and spaces", func(t *testing.T) {
		prefix = Prefix(t)
		if strings.ContainsAny(prefix, "{} ") || !strings.HasPrefix(prefix, root) {
			t.Fatalf("Prefix = %q: not under %q, or braces or spaces in it", prefix, root)
		}
		if other := Prefix(t); other == prefix {
			t.Fatalf("two calls gave one prefix %q", prefix)
		}
		for _, k := range []string{"a", "{b}", "c:d"} {
			do(t, addr, "SET", prefix+k, "1")
		}
		if keys, err := Keys(addr, prefix); err != nil || len(keys) != 3 {
			t.Fatalf("Keys = %v, %v; want the 3 keys written", keys, err)
		}
	})
	if keys, err := Keys(addr, prefix); err != nil || len(keys) != 0 {
		t.Fatalf("after the test: Keys = %v, %v; want none", keys, err)
	}
}

func TestDeleteKeysMatchesThePrefixLiterally(t *testing.T) {
	addr := Shared(t)
	base := Prefix(t)
	glob, plain := base+`p[1]*?\:`, base+"p1xy:"
	for _, k := range []string{glob + "a", glob + "b", plain + "a"} {
		do(t, addr, "SET", k, "1")
	}
	n, err := DeleteKeys(addr, glob)
	if err != nil || n != 2 {
		t.Fatalf("DeleteKeys(%q) = %d, %v; want 2", glob, n, err)
	}
	keys, err := Keys(addr, base)
	if err != nil || !slices.Equal(keys, []string{plain + "a"}) {
		t.Fatalf("left %v, %v; want only %q", keys, err, plain+"a")
	}
}

func TestDeleteKeysRefusesAnEmptyPrefix(t *testing.T) {
	if _, err := DeleteKeys(Shared(t), ""); err == nil {
		t.Fatal("DeleteKeys with an empty prefix succeeded")
	}
}

func TestDeleteKeysManyBatches(t *testing.T) {
	addr := Shared(t)
	prefix := Prefix(t)
	args := []string{"MSET"}
	for i := range 2500 {
		args = append(args, prefix+strconv.Itoa(i), "v")
	}
	do(t, addr, args...)
	if n, err := DeleteKeys(addr, prefix); err != nil || n != 2500 {
		t.Fatalf("DeleteKeys = %d, %v; want 2500", n, err)
	}
}
