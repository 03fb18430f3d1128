package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
	tollgate "github.com/tollgate-go/tollgate/core"
)

// gcraScript is tollgate.GCRA in Lua, over a batch of buckets in one atomic
// call. The bucket of KEYS[i] is its theoretical arrival time (TAT), in
// microseconds since the Unix epoch on the Redis server's clock; a missing key
// is a full bucket.
//
// ARGV[1] is the time in microseconds, or "" for the server's TIME. Tests
// pass their own clock, which does not run with the server's, so their keys
// get ten more minutes to live lest they expire before the test's time has
// reached the end of their TTL. ARGV[2i] and ARGV[2i+1] are the tolerance (Burst x
// token interval) and the need (cost x token interval) of KEYS[i], integers
// computed in Go, so the script only adds, subtracts and compares integers
// below 2^53, which Lua's doubles hold exactly.
//
// For each key the reply holds rel, how far the TAT was ahead of now before
// the request (0 for a full bucket): rel when allowed, -rel-1 when denied.
// The caller derives the whole Result from it with tollgate.GCRA. An allowed
// request stores the new TAT with a TTL that ends when the bucket is full
// again: rounded up to the millisecond, plus one because Redis counts the TTL
// from its clock truncated to the millisecond, so the key never expires
// before the bucket is full and lives at most 2ms longer. A denied request
// writes nothing.
// Repeated keys are handled in order, each seeing the previous one's effect.
//
// Numbers go to redis.call as they are: Redis writes a Lua number with all
// the digits of an integer below 2^53 (as "%.17g" before 7.0, as the shortest
// exact form since), which is cheaper than string.format on every key.
//
// TIME is non-deterministic, so the script must be replicated by its
// effects; that is the only mode of Redis 7, and replicate_commands asks for
// it on Redis 3.2 to 6.
const gcraScript = `
local now = tonumber(ARGV[1])
local slack = 0
if now then
  slack = 600000
else
  redis.replicate_commands()
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local out = {}
for i = 1, #KEYS do
  local tolerance = tonumber(ARGV[2 * i])
  local need = tonumber(ARGV[2 * i + 1])
  local rel = 0
  local tat = tonumber(redis.call('GET', KEYS[i]))
  if tat and tat > now then
    rel = tat - now
  end
  if need > tolerance - rel then
    out[i] = -rel - 1
  else
    local ahead = rel + need
    local ttl = (ahead + 999 - math.fmod(ahead + 999, 1000)) / 1000 + 1 + slack
    redis.call('SET', KEYS[i], now + ahead, 'PX', ttl)
    out[i] = rel
  end
end
return out
`

// scriptSHA names the script in EVALSHA.
var scriptSHA = redis.NewScript(gcraScript).Hash()

// maxKeysPerScript bounds one script call, so that Redis, which runs one
// script at a time, is never held for long.
const maxKeysPerScript = 256

// A group is the calls one script call carries, by their index in the batch.
type group struct {
	idx []int
	cmd *redis.Cmd
}

// An outcome is the script's answer for one call (see gcraScript), or the
// error that kept it from one.
type outcome struct {
	v   int64
	err error
}

// exec runs one batch: one script call per group in a single pipeline (or a
// plain call when there is one group). Calls whose script cache was empty
// (after a restart, a failover or SCRIPT FLUSH) are sent again with EVAL,
// which runs and caches the script; a NOSCRIPT reply means the script did
// not run, so nothing is taken twice. exec writes nothing into the calls,
// because a watchdog may have answered them meanwhile; it returns one
// outcome per call and the first error.
func (s *Store) exec(ctx context.Context, batch []*call) ([]outcome, error) {
	now := ""
	if s.scriptClock != nil {
		now = strconv.FormatInt(s.scriptClock().UnixMicro(), 10)
	}
	if len(batch) == 1 {
		return s.execOne(ctx, batch[0], now)
	}
	groups := s.group(batch)
	send := func(g *group, c redis.Scripter, eval bool) {
		keys := make([]string, len(g.idx))
		args := make([]any, 1+2*len(g.idx))
		args[0] = now
		for i, j := range g.idx {
			c := batch[j]
			keys[i] = c.rkey
			args[1+2*i] = c.tolerance
			args[2+2*i] = c.need
		}
		if eval {
			g.cmd = c.Eval(ctx, gcraScript, keys, args...)
		} else {
			g.cmd = c.EvalSha(ctx, scriptSHA, keys, args...)
		}
	}
	for attempt := range 2 {
		eval := attempt == 1
		var todo []*group
		for i := range groups {
			if g := &groups[i]; g.cmd == nil || eval && isNoScript(g.cmd.Err()) {
				todo = append(todo, g)
			}
		}
		if len(todo) == 0 {
			break
		}
		if len(todo) == 1 {
			send(todo[0], s.client, eval)
		} else {
			pipe := s.client.Pipeline()
			for _, g := range todo {
				send(g, pipe, eval)
			}
			_, _ = pipe.Exec(ctx) // errors are read from each command
		}
	}
	out := make([]outcome, len(batch))
	var first error
	for i := range groups {
		g := &groups[i]
		vals, err := g.cmd.Int64Slice()
		if err == nil && len(vals) != len(g.idx) {
			err = fmt.Errorf("the script answered %d values for %d keys", len(vals), len(g.idx))
		}
		if err != nil && first == nil {
			first = err
		}
		for k, j := range g.idx {
			if err != nil {
				out[j].err = err
			} else {
				out[j].v = vals[k]
			}
		}
	}
	return out, first
}

// execOne is exec for a batch of one call, the shape of every request on an
// idle Store, with fewer allocations.
func (s *Store) execOne(ctx context.Context, c *call, now string) ([]outcome, error) {
	keys := []string{c.rkey}
	cmd := s.client.EvalSha(ctx, scriptSHA, keys, now, c.tolerance, c.need)
	if isNoScript(cmd.Err()) {
		cmd = s.client.Eval(ctx, gcraScript, keys, now, c.tolerance, c.need)
	}
	out := make([]outcome, 1)
	vals, err := cmd.Int64Slice()
	if err == nil && len(vals) != 1 {
		err = fmt.Errorf("the script answered %d values for 1 key", len(vals))
	}
	if err != nil {
		out[0].err = err
		return out, err
	}
	out[0].v = vals[0]
	return out, nil
}

// group splits a batch into script calls. A plain client takes any keys in
// one call. Redis Cluster runs a script only over keys of one slot, so calls
// are grouped by slot (go-redis then sends each to its node). Any other
// client (a Ring, a wrapper) gets one key per call, the only shape that is
// safe whatever its sharding.
func (s *Store) group(batch []*call) []group {
	var groups []group
	add := func(idx []int) {
		for len(idx) > maxKeysPerScript {
			groups = append(groups, group{idx: idx[:maxKeysPerScript]})
			idx = idx[maxKeysPerScript:]
		}
		groups = append(groups, group{idx: idx})
	}
	switch {
	case s.mode == modeSingle || len(batch) == 1:
		idx := make([]int, len(batch))
		for i := range idx {
			idx[i] = i
		}
		add(idx)
	case s.mode == modeCluster:
		bySlot := make(map[int][]int)
		var order []int
		for i, c := range batch {
			sl := slot(c.rkey)
			if _, ok := bySlot[sl]; !ok {
				order = append(order, sl)
			}
			bySlot[sl] = append(bySlot[sl], i)
		}
		for _, sl := range order {
			add(bySlot[sl])
		}
	default:
		groups = make([]group, len(batch))
		for i := range batch {
			groups[i].idx = []int{i}
		}
	}
	return groups
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// decode turns the script's answer v for c into its Result, computed by
// tollgate.GCRA itself from the bucket's state as the script saw it.
func (c *call) decode(v int64) error {
	allowed := v >= 0
	rel := v
	if !allowed {
		rel = -v - 1
	}
	_, r := tollgate.GCRA(rel, 0, c.limit, c.cost)
	if r.Allowed != allowed {
		return fmt.Errorf("the script and tollgate.GCRA disagree (rel %d, limit %v, cost %d)", rel, c.limit, c.cost)
	}
	c.rel, c.res = rel, r
	return nil
}
