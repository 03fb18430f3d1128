package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core/storekit"
)

// checkTimeout bounds a Check whose context has no deadline.
const checkTimeout = 2 * time.Second

// checkTenant is the tenant whose state Check takes from and resets. An ID
// that starts with '#' is always hashed, so its key is under the prefix and
// apart from every real tenant's.
const checkTenant = "#tollgate-check"

// check answers a storekit.Check: that every server answers, accepts the
// credentials and the database, lets the user load the script and run it
// on keys under the prefix (a Take, a Reset and a Release of a bucket, a
// quota and an in-flight cap of checkTenant); then it warns if Redis may
// evict the Store's keys.
func (s *Store) check(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, checkTimeout)
		defer cancel()
	}
	servers, err := s.servers(ctx)
	if err != nil {
		return s.checkError(ctx, "finding the servers", err)
	}
	for _, srv := range servers {
		if err := once(ctx, srv, "PING"); err != nil {
			return s.checkError(ctx, "PING", err)
		}
		if err := once(ctx, srv, "SCRIPT", "LOAD", s.script.src); err != nil {
			return s.checkError(ctx, "SCRIPT LOAD", err)
		}
	}
	day := func(t time.Time) (time.Time, time.Time) {
		start := t.UTC().Truncate(24 * time.Hour)
		return start, start.Add(24 * time.Hour)
	}
	rules := []storekit.Rule{
		storekit.BucketRule(1000, 1000),
		{Kind: storekit.Quota, Name: "check", Burst: 1000, Period: day},
		{Kind: storekit.InFlight, Name: "check", Burst: 1000},
	}
	// A Reset leaves the lease: the Release takes it away.
	for _, kind := range []storekit.Kind{storekit.Take, storekit.Reset, storekit.Release} {
		op := storekit.Op{Kind: kind, Tenant: checkTenant, Rules: rules, Cost: 1, Lease: "check", LeaseTTL: checkTimeout}
		if err := s.Do(ctx, &op); err != nil {
			return s.checkError(ctx, "the script", err)
		}
	}
	for _, srv := range servers {
		dialAhead(ctx, srv)
	}
	s.warnEviction(ctx, servers)
	return nil
}

// dialAhead opens the connections the runners of a server use, so that
// the first requests do not wait for them: on a saturated CPU a dial may
// take longer than its budget.
func dialAhead(ctx context.Context, srv *redis.Client) {
	var wg sync.WaitGroup
	for range maxRunners {
		wg.Go(func() { _ = once(ctx, srv, "PING") })
	}
	wg.Wait()
}

// once sends a command without go-redis's retries, so that a Check of a
// Redis out of reach ends with the first failure and its cause.
func once(ctx context.Context, c *redis.Client, args ...any) error {
	pipe := c.Pipeline()
	cmd := onceCmd{redis.NewCmd(ctx, args...)}
	_ = pipe.Process(ctx, cmd)
	_, err := pipe.Exec(ctx)
	return replyError(cmd, err)
}

// servers returns the runners' client of every server that holds the
// Store's keys: the masters of a cluster, the shards of a ring.
func (s *Store) servers(ctx context.Context) ([]*redis.Client, error) {
	if s.single != nil {
		return []*redis.Client{s.single.client}, nil
	}
	var mu sync.Mutex
	var out []*redis.Client
	add := func(_ context.Context, node *redis.Client) error {
		e := s.nodeEndpoint(node)
		mu.Lock()
		out = append(out, e.client)
		mu.Unlock()
		return nil
	}
	var err error
	switch cl := s.client.(type) {
	case *redis.ClusterClient:
		err = cl.ForEachMaster(ctx, add)
	case *redis.Ring:
		err = cl.ForEachShard(ctx, add)
	}
	return out, err
}

// checkError explains why a Check failed. A Redis that could not be
// reached is named with the cause a dial of our own finds (a connection
// refused, no such host), which go-redis only logs.
func (s *Store) checkError(ctx context.Context, what string, err error) error {
	if errors.Is(err, storekit.ErrMisconfigured) || isMisconfigured(err) {
		if !errors.Is(err, storekit.ErrMisconfigured) {
			err = fmt.Errorf("%w: %w", storekit.ErrMisconfigured, err)
		}
		return fmt.Errorf("redisstore: Check: %s: %w", what, err)
	}
	if isReply(err) {
		return unavailable("unavailable", fmt.Errorf("redisstore: Check: %s: %w", what, err))
	}
	var ue *unavailableError
	kind := "unavailable"
	if errors.As(err, &ue) {
		kind = ue.kind
	}
	// go-redis reports a dial that failed as the context's end, and logs
	// the cause on its own: find it again.
	if isTimeout(err) || errors.Is(err, context.Canceled) {
		if cause := s.probe(ctx); cause != "" {
			return unavailable(kind, fmt.Errorf("redisstore: Check: %s: %s (%w)", what, cause, err))
		}
	}
	return unavailable(kind, fmt.Errorf("redisstore: Check: %s: %w", what, err))
}

// probe dials the client's addresses itself and says what it met.
func (s *Store) probe(ctx context.Context) string {
	var network string
	var addrs []string
	switch cl := s.client.(type) {
	case *redis.Client:
		network, addrs = cl.Options().Network, []string{cl.Options().Addr}
	case *redis.ClusterClient:
		addrs = cl.Options().Addrs
	case *redis.Ring:
		for _, a := range cl.Options().Addrs {
			addrs = append(addrs, a)
		}
	}
	if network == "" {
		network = "tcp"
	}
	var found []string
	for _, addr := range addrs {
		if _, _, err := net.SplitHostPort(addr); err != nil && network == "tcp" {
			continue // not an address: a Sentinel failover client's, for one
		}
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 500*time.Millisecond)
		conn, err := (&net.Dialer{}).DialContext(dctx, network, addr)
		cancel()
		if err != nil {
			found = append(found, fmt.Sprintf("cannot reach Redis at %s: %v", addr, err))
			continue
		}
		conn.Close()
		found = append(found, fmt.Sprintf("Redis at %s accepts connections but did not answer within %v", addr, s.timeout))
	}
	return strings.Join(found, "; ")
}

// warnEviction logs a warning when a server may evict keys: a maxmemory
// with any policy but noeviction. Every key of the Store has a TTL, so even
// the volatile policies may take them, and an evicted state is an empty
// one: throttled tenants would get fresh bursts and quotas.
func (s *Store) warnEviction(ctx context.Context, servers []*redis.Client) {
	if s.logger == nil {
		return
	}
	for _, srv := range servers {
		info, err := srv.Info(ctx, "memory").Result()
		if err != nil {
			s.logger.LogAttrs(ctx, slog.LevelInfo,
				"redisstore: could not read maxmemory-policy (INFO memory); make sure Redis never evicts the rate limiter's keys",
				slog.String("error", err.Error()))
			return
		}
		maxmemory, policy := infoField(info, "maxmemory"), infoField(info, "maxmemory_policy")
		if n, _ := strconv.ParseInt(maxmemory, 10, 64); n > 0 && policy != "noeviction" {
			s.logger.LogAttrs(ctx, slog.LevelWarn,
				"redisstore: Redis may evict the rate limiter's keys under memory pressure, and an evicted state is an empty one: throttled tenants would get fresh bursts and quotas. Set maxmemory-policy noeviction, or give the rate limiter a Redis of its own",
				slog.String("server", srv.Options().Addr), slog.String("maxmemory", maxmemory), slog.String("maxmemory_policy", policy))
			return
		}
	}
}

func infoField(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
