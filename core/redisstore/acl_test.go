package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/redisstore"
)

// storeACL is the ACL docs/redis.md gives for a Store with the default
// prefix: every command the store sends, on its keys and channel only.
var storeACL = []string{
	"on", ">s3cret", "resetkeys", "~tollgate:*", "resetchannels", "&tollgate:*", "-@all",
	"+evalsha", "+eval", "+time", "+get", "+set", "+del", "+incrby", "+pexpire", "+publish",
	"+hget", "+hset", "+hincrby", "+subscribe", "+unsubscribe", "+ping", "+info",
}

func setUser(t *testing.T, admin *redis.Client, name string, rules ...string) {
	t.Helper()
	args := append([]any{"ACL", "SETUSER", name}, anys(rules)...)
	if err := admin.Do(bg, args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER %s: %v", name, err)
	}
}

func anys(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

func without(rules []string, drop string) []string {
	var out []string
	for _, r := range rules {
		if r != drop {
			out = append(out, r)
		}
	}
	return out
}

// TestACL runs a Store as a Redis user with exactly the documented ACL, and
// users that lack a part of it, wrong credentials and a database that does
// not exist: Check passes for the first and names the cause for the others,
// as misconfiguration; decisions fail as misconfiguration too, without
// opening the circuit breaker.
func TestACL(t *testing.T) {
	srv := startServer(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.addr()})
	defer admin.Close()
	user := func(name, password string, db int) *redisstore.Store {
		c := redis.NewClient(&redis.Options{Addr: srv.addr(), Username: name, Password: password, DB: db, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		s, err := redisstore.New(c, redisstore.WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	setUser(t, admin, "tollgate", storeACL...)
	s := user("tollgate", "s3cret", 0)
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check with the documented ACL: %v", err)
	}
	limit := tollgate.Limit{Rate: 1.0 / 3600, Burst: 1}
	rules := []tollgate.Rule{{Limit: limit}, {Sub: "day", Quota: tollgate.PerDay(5)}}
	for _, kind := range []tollgate.OpKind{tollgate.OpTake, tollgate.OpTake, tollgate.OpInspect, tollgate.OpReset} {
		if err := s.Do(bg, &tollgate.Op{Kind: kind, Key: "acme", Rules: rules, Cost: 1}); err != nil {
			t.Fatalf("%v with the documented ACL: %v", kind, err)
		}
	}
	s.Take(bg, "acme", limit, 1)
	s.Take(bg, "acme", limit, 1)
	waitListening(t, s) // the subscription works too

	cases := []struct {
		name  string
		store func() *redisstore.Store
		cause string
	}{
		{"wrong password", func() *redisstore.Store { return user("tollgate", "wrong", 0) }, "WRONGPASS"},
		{"database out of range", func() *redisstore.Store { return user("default", "", 99) }, "DB index"},
		{"no SET", func() *redisstore.Store {
			setUser(t, admin, "noset", without(storeACL, "+set")...)
			return user("noset", "s3cret", 0)
		}, "can't run this command"},
		{"keys of another prefix", func() *redisstore.Store {
			setUser(t, admin, "otherkeys", append(without(storeACL, "~tollgate:*"), "~other:*")...)
			return user("otherkeys", "s3cret", 0)
		}, "NOPERM"},
		{"no channel", func() *redisstore.Store {
			setUser(t, admin, "nochannel", without(storeACL, "&tollgate:*")...)
			return user("nochannel", "s3cret", 0)
		}, "can't publish"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := c.store()
			err := s.Check(ctx)
			if !errors.Is(err, tollgate.ErrMisconfigured) || errors.Is(err, redisstore.ErrUnavailable) || !strings.Contains(err.Error(), c.cause) {
				t.Fatalf("Check: %v; want a misconfiguration naming %s", err, c.cause)
			}
			if c.name == "no channel" {
				return // decisions need no channel until a denial is cached
			}
			for i := range 2 * redisstore.DefaultBreakerFailures {
				_, err := s.Take(context.Background(), "tenant-"+c.name, limit, 1)
				if !errors.Is(err, tollgate.ErrMisconfigured) || errors.Is(err, redisstore.ErrCircuitOpen) || !strings.Contains(err.Error(), c.cause) {
					t.Fatalf("Take %d: %v; want a misconfiguration naming %s, and no open breaker", i, err, c.cause)
				}
			}
		})
	}
}

// TestCheckEviction checks the warning Check logs when Redis may evict
// buckets, and its silence when it may not.
func TestCheckEviction(t *testing.T) {
	srv := startServer(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.addr()})
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, c := range []struct {
		maxmemory, policy string
		warn              bool
	}{
		{"0", "allkeys-lru", false},
		{"100mb", "noeviction", false},
		{"100mb", "allkeys-lru", true},
		{"100mb", "volatile-ttl", true},
	} {
		admin.ConfigSet(ctx, "maxmemory", c.maxmemory)
		admin.ConfigSet(ctx, "maxmemory-policy", c.policy)
		var logs logBuffer
		s := newStore(t, admin, redisstore.WithPrefix(testPrefix(t)), redisstore.WithLogger(logs.logger()))
		if err := s.Check(ctx); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(logs.String(), "may evict"); got != c.warn {
			t.Fatalf("maxmemory %s, %s: warned %v, want %v\n%s", c.maxmemory, c.policy, got, c.warn, logs.String())
		}
	}
}
