package redisstore_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	tollgate "github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/redisstore"
	"github.com/tollgate-go/tollgate/core/redistest"
	"github.com/tollgate-go/tollgate/core/storekit"
)

func check(s *redisstore.Store) error {
	return s.Do(context.Background(), &storekit.Op{Kind: storekit.Check})
}

// TestCheckHealthy: Check passes on a healthy Redis, single and cluster,
// and leaves no key behind.
func TestCheckHealthy(t *testing.T) {
	client := sharedClient(t)
	s := newStore(t, client)
	if err := check(s); err != nil {
		t.Fatal(err)
	}
	prefix := strings.TrimSuffix(s.Key("x"), "{x}")
	if keys, _ := redistest.Keys(client.Options().Addr, prefix); len(keys) > 0 {
		t.Errorf("Check left keys: %v", keys)
	}
	cluster := startCluster(t)
	if err := check(newStore(t, cluster)); err != nil {
		t.Errorf("cluster: %v", err)
	}
}

// TestCheckMisconfigured: mistakes that waiting will not mend wrap
// ErrMisconfigured and name their cause, and make tollgate.New fail.
func TestCheckMisconfigured(t *testing.T) {
	srv := redistest.Start(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	ctx := context.Background()
	if err := admin.ConfigSet(ctx, "requirepass", "secret").Err(); err != nil {
		t.Fatal(err)
	}
	for _, acl := range [][]any{
		{"ACL", "SETUSER", "noeval", "on", ">pw", "~*", "+@all", "-evalsha"},
		{"ACL", "SETUSER", "noload", "on", ">pw", "~*", "+@all", "-script|load"},
		{"ACL", "SETUSER", "otherkeys", "on", ">pw", "~other:*", "+@all"},
		{"ACL", "SETUSER", "nohset", "on", ">pw", "~*", "+@all", "-hset"},
		{"ACL", "SETUSER", "readonly", "on", ">pw", "%R~*", "+@all"},
	} {
		if err := admin.Do(ctx, acl...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for name, c := range map[string]struct {
		opts redis.Options
		want string
	}{
		"wrong password":   {redis.Options{Password: "wrong"}, "WRONGPASS"},
		"no password":      {redis.Options{}, "NOAUTH"},
		"DB 99":            {redis.Options{Password: "secret", DB: 99}, "DB index"},
		"no EVALSHA":       {redis.Options{Username: "noeval", Password: "pw"}, "evalsha"},
		"no SCRIPT LOAD":   {redis.Options{Username: "noload", Password: "pw"}, "script"},
		"keys not allowed": {redis.Options{Username: "otherkeys", Password: "pw"}, "NOPERM"},
		"no HSET":          {redis.Options{Username: "nohset", Password: "pw"}, "hset"},
		"read only":        {redis.Options{Username: "readonly", Password: "pw"}, "NOPERM"},
	} {
		t.Run(name, func(t *testing.T) {
			opts := c.opts
			opts.Addr = srv.Addr()
			client := redis.NewClient(&opts)
			defer client.Close()
			s := newStore(t, client)
			err := check(s)
			if !errors.Is(err, storekit.ErrMisconfigured) || !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(c.want)) {
				t.Fatalf("Check: %v; want ErrMisconfigured naming %q", err, c.want)
			}
			t.Logf("Check: %v", err)
			_, err = tollgate.New(s, tollgate.SinglePlan(tollgate.Plan{Name: "p", Limit: tollgate.Limit{Rate: 1, Burst: 1}}), tollgate.WithLogger(nil))
			if !errors.Is(err, tollgate.ErrMisconfigured) {
				t.Errorf("tollgate.New: %v, want ErrMisconfigured", err)
			}
		})
	}
}

// TestCheckUnreachable: a Redis out of reach is an ErrUnavailable whose
// text names the cause, not only a deadline.
func TestCheckUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := l.Addr().String()
	l.Close()
	srv := redistest.Start(t)
	silent := redistest.NewProxy(t, srv.Addr())
	silent.Silence()
	for name, c := range map[string]struct{ addr, want string }{
		"refused":      {refused, "connection refused"},
		"no such host": {"no-such-host.invalid:6379", "no such host"},
		"silent":       {silent.Addr(), "accepts connections but did not answer"},
	} {
		t.Run(name, func(t *testing.T) {
			client := redis.NewClient(&redis.Options{Addr: c.addr})
			defer client.Close()
			err := check(newStore(t, client))
			if !errors.Is(err, redisstore.ErrUnavailable) || errors.Is(err, storekit.ErrMisconfigured) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Check: %v; want ErrUnavailable naming %q", err, c.want)
			}
			t.Logf("Check: %v", err)
		})
	}
}

// TestCheckEviction: Check warns when Redis may evict the Store's keys.
func TestCheckEviction(t *testing.T) {
	for policy, warn := range map[string]bool{"allkeys-lru": true, "volatile-ttl": true, "noeviction": false} {
		t.Run(policy, func(t *testing.T) {
			srv := redistest.Start(t, "--maxmemory", "100mb", "--maxmemory-policy", policy)
			client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			defer client.Close()
			var logs bytes.Buffer
			s := newStore(t, client, redisstore.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			if err := check(s); err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(logs.String(), "evict"); got != warn {
				t.Errorf("warned %v, want %v:\n%s", got, warn, logs.String())
			}
		})
	}
}
