package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	tollgate "github.com/tollgate-go/tollgate/core"
)

// checkTimeout bounds Check when its context has no deadline.
const checkTimeout = 2 * time.Second

// checkTenant is the tenant whose keys Check writes and deletes: a tenant
// ID that starts with '#' is always hashed, so it is under the prefix and
// apart from every real tenant's readable key.
const checkTenant = "#tollgate-check"

// Check verifies, before the first request, that the Store can work: that
// Redis answers, that the credentials are accepted, that the user may load
// and run the script on keys under the prefix (it takes from a bucket and a
// quota of its own and resets them) and may publish and subscribe to the
// channel of resets (when the denial cache is on). Then it reads maxmemory
// and maxmemory-policy where the user may (INFO memory) and logs a warning
// when Redis may evict buckets. It implements tollgate.Checker:
// tollgate.New calls it.
//
// Errors that waiting will not mend wrap tollgate.ErrMisconfigured and name
// their cause (WRONGPASS, NOPERM, an unknown database...); a Redis out of
// reach gives an error wrapping ErrUnavailable. Without a deadline on ctx,
// Check gives up after two seconds.
func (s *Store) Check(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, checkTimeout)
		defer cancel()
	}
	// go-redis ignores deadlines unless ContextTimeoutEnabled is set: the
	// check runs apart, and Check returns at the deadline regardless.
	done := make(chan error, 1)
	go func() { done <- s.check(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: Check: no answer from Redis: %w", ErrUnavailable, ctx.Err())
	}
}

func (s *Store) check(ctx context.Context) error {
	if err := s.client.Ping(ctx).Err(); err != nil {
		return checkErr("PING", err)
	}
	limit := tollgate.Limit{Rate: 1000, Burst: 1000}
	rules := []tollgate.Rule{{Limit: limit}, {Sub: "check", Quota: tollgate.PerDay(1e9)}}
	for _, kind := range []tollgate.OpKind{tollgate.OpTake, tollgate.OpReset} {
		op := &tollgate.Op{Kind: kind, Key: checkTenant, Rules: rules, Cost: 1}
		c := &call{op: op, tenant: redisKey(s.prefix, checkTenant)}
		c.prepareKeys(s.wallNow(), &s.bounds)
		c.encode()
		groups, err := s.exec(ctx, []*call{c}, nil, &scratch{})
		if err != nil {
			return checkErr("the script ("+kind.String()+")", err)
		}
		now, vals, err := reply(&groups[0], []*call{c})
		if err == nil {
			err = c.decode(now, vals)
		}
		if err != nil {
			return fmt.Errorf("redisstore: Check: the script (%v): %w", kind, err)
		}
	}
	if s.cache != nil {
		ps := s.client.Subscribe(ctx, s.channel)
		_, err := ps.Receive(ctx)
		ps.Close()
		if err != nil {
			return checkErr("SUBSCRIBE "+s.channel, err)
		}
	}
	s.checkEviction(ctx)
	return nil
}

func checkErr(what string, err error) error {
	if isMisconfig(err) {
		return fmt.Errorf("%w: redisstore: Check: %s: %w", tollgate.ErrMisconfigured, what, err)
	}
	return fmt.Errorf("%w: redisstore: Check: %s: %w", ErrUnavailable, what, err)
}

// checkEviction logs a warning when Redis may evict buckets: a maxmemory
// with any policy but noeviction. An evicted bucket is a full one, so
// throttled tenants would get fresh bursts under memory pressure.
func (s *Store) checkEviction(ctx context.Context) {
	if s.logger == nil {
		return
	}
	var infos []string
	var err error
	if cc, ok := s.client.(*redis.ClusterClient); ok {
		ch := make(chan string, 64)
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			info, err := c.Info(ctx, "memory").Result()
			if err == nil {
				ch <- info
			}
			return err
		})
		close(ch)
		for info := range ch {
			infos = append(infos, info)
		}
	} else {
		var info string
		info, err = s.client.Info(ctx, "memory").Result()
		infos = append(infos, info)
	}
	if err != nil {
		s.logger.LogAttrs(ctx, slog.LevelInfo,
			"redisstore: could not read maxmemory and maxmemory-policy (INFO memory); make sure Redis never evicts tollgate's keys",
			slog.String("error", err.Error()))
		return
	}
	for _, info := range infos {
		maxmemory, policy := infoField(info, "maxmemory"), infoField(info, "maxmemory_policy")
		if n, _ := strconv.ParseInt(maxmemory, 10, 64); n > 0 && policy != "noeviction" {
			s.logger.LogAttrs(ctx, slog.LevelWarn,
				"redisstore: Redis may evict rate-limit buckets under memory pressure, and an evicted bucket is a full one: throttled tenants would get fresh bursts. Set maxmemory-policy noeviction (or maxmemory 0) on this Redis, or give tollgate a Redis of its own with noeviction",
				slog.String("maxmemory", maxmemory), slog.String("maxmemory_policy", policy))
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

var _ = errors.New
