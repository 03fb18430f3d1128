package redisstore_test

import (
	"strings"
	"testing"

	"github.com/tollgate-go/tollgate/core/redisstore"
)

func TestRedisKeyForms(t *testing.T) {
	raw := []string{"acme", "tenant-42", "a:b/c.d_e@f", strings.Repeat("k", redisstore.MaxRawKey), "x#y"}
	for _, k := range raw {
		if got, want := redisstore.RedisKey("p:", k), "p:{"+k+"}"; got != want {
			t.Errorf("RedisKey(%q) = %q, want the readable %q", k, got, want)
		}
	}
	hashed := []string{
		"", "{acme}", "ac}me", "a{b", "#acme", "with space", "tab\t", "\x00", "\xff", "日本",
		strings.Repeat("k", redisstore.MaxRawKey+1), strings.Repeat("x", 1<<20),
	}
	for _, k := range hashed {
		got := redisstore.RedisKey("p:", k)
		if !strings.HasPrefix(got, "p:{#") || !strings.HasSuffix(got, "}") || len(got) != len("p:{#}")+43 {
			t.Errorf("RedisKey(%q) = %q, want p:{#<43 base64url bytes>}", k, got)
		}
	}
}

// checkKey checks the shape every Redis key must have: the prefix, then a
// hash tag that runs to the end of the key, contains no brace and is never
// empty, at a bounded length.
func checkKey(t *testing.T, prefix, key, rkey string) {
	t.Helper()
	if !strings.HasPrefix(rkey, prefix+"{") || !strings.HasSuffix(rkey, "}") {
		t.Fatalf("RedisKey(%q) = %q: not prefix{tag}", key, rkey)
	}
	tag := rkey[len(prefix)+1 : len(rkey)-1]
	if tag == "" || strings.ContainsAny(tag, "{}") {
		t.Fatalf("RedisKey(%q) = %q: hash tag %q is empty or has a brace", key, rkey, tag)
	}
	if len(rkey) > len(prefix)+2+redisstore.MaxRawKey {
		t.Fatalf("RedisKey(%q) is %d bytes long", key, len(rkey))
	}
}

func FuzzRedisKey(f *testing.F) {
	for _, s := range []string{"", "acme", "{acme}", "#", "#x", "a}b{c", "\x00", strings.Repeat("z", 65)} {
		f.Add(s, "acme")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		const prefix = "tollgate:"
		ka, kb := redisstore.RedisKey(prefix, a), redisstore.RedisKey(prefix, b)
		checkKey(t, prefix, a, ka)
		checkKey(t, prefix, b, kb)
		if (a == b) != (ka == kb) {
			t.Fatalf("keys %q and %q map to %q and %q", a, b, ka, kb)
		}
	})
}

func TestSlot(t *testing.T) {
	// The CRC16 check value of the Redis Cluster specification.
	if got := redisstore.Slot("p{123456789}"); got != 0x31C3&16383 {
		t.Fatalf("Slot = %d, want %d", got, 0x31C3&16383)
	}
	// A tenant cannot choose its slot: braces in its ID are hashed away.
	if redisstore.Slot(redisstore.RedisKey("p:", "{x}evil")) == redisstore.Slot(redisstore.RedisKey("p:", "x")) &&
		redisstore.Slot(redisstore.RedisKey("p:", "{y}evil")) == redisstore.Slot(redisstore.RedisKey("p:", "y")) {
		t.Fatal("a tenant ID with a hash tag landed in the tag's slot")
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	client := newClient(t)
	bad := map[string][]redisstore.Option{
		"brace in prefix":  {redisstore.WithPrefix("app{1}:")},
		"negative backoff": {redisstore.WithCircuitBreaker(3, -1)},
		"negative cache":   {redisstore.WithDenialCache(-1)},
	}
	for name, opts := range bad {
		if _, err := redisstore.New(client, opts...); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
	if _, err := redisstore.New(nil); err == nil {
		t.Error("New(nil) succeeded")
	}
	if _, err := redisstore.New(client, redisstore.WithCircuitBreaker(0, 0), redisstore.WithDenialCache(0)); err != nil {
		t.Errorf("turning the breaker and the cache off: %v", err)
	}
}

func TestStoreKey(t *testing.T) {
	s := newStore(t, newClient(t), redisstore.WithPrefix("app:"))
	if got := s.Key("acme"); got != "app:{acme}" {
		t.Fatalf("Key(acme) = %q", got)
	}
	if got := s.Key("{acme}"); got != redisstore.RedisKey("app:", "{acme}") {
		t.Fatalf("Key({acme}) = %q", got)
	}
}
