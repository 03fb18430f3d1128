package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// opScript runs a batch of Ops, each atomically over its rules, in one
// atomic script call. Each Op is tollgate.GCRA for its token buckets and a
// counter per calendar period for its quotas, transcribed in integer
// arithmetic.
//
// ARGV[1] is the time in microseconds, or "" for the server's TIME; ARGV[2]
// the channel on which resets and cancels are announced, with the Op's first
// key, so that every replica drops what its denial cache knows of the
// tenant. Tests
// pass their own clock, which does not run with the server's, so their keys
// get ten more minutes to live lest they expire before the test's time has
// reached the end of their TTL. Then, for each Op: its kind (0 take, 1
// inspect, 2 reset, 3 cancel), its MaxDelay in microseconds and its number of
// rules, and for each rule either
//
//	1, tolerance, need, mark                 a token bucket: one key
//	2, tokens, cost, b0, b1, b2, mark        a quota: two keys
//
// where tolerance is Burst x token interval and need is cost x token
// interval, integers computed in Go, so the script only adds, subtracts and
// compares integers below 2^53, which Lua's doubles hold exactly. A bucket's
// key holds its theoretical arrival time (TAT) in microseconds since the
// Unix epoch; a missing key is a full bucket. A quota's keys are those of the
// periods [b0, b1) and [b1, b2), computed in Go around its own clock; the
// period that holds the server's now is used, so boundaries are decided on
// Redis's clock. A quota key holds the tokens used in its period and expires
// when the period ends.
//
// Keys are isolated: a key of another type fails its own Op only (nothing
// written for that Op), and a string that is not a valid state (garbage, a
// negative number, a TAT further ahead than any limit allows) is read as a
// full bucket or an unused quota, repaired by the Op's writes, and reported.
//
// The reply is flat: the server's now, then for each Op a code (1 granted
// and written, 0 denied or nothing to do, -r the key of rule r has another
// type, -1000-r the clock is outside rule r's periods), a bit mask of the
// rules whose state was repaired, and two numbers per rule: for a bucket rel,
// how far its TAT was ahead of now (0 for a full bucket), and 0; for a quota
// the tokens used in the period and which of the two periods (0 or 1). Take
// and inspect report the state before the request, cancel the state after
// it. A denied Op writes nothing.
//
// TIME is non-deterministic, so the script must be replicated by its
// effects; that is the only mode of Redis 7, and replicate_commands asks for
// it on Redis 3.2 to 6.
const opScript = `
local now = tonumber(ARGV[1])
local slack = 0
if now then
  slack = 600000
else
  redis.replicate_commands()
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local maxAhead = 6307200000000000
local out = {now}
local channel = ARGV[2]
local k, a, n = 1, 3, 1

local function readNumber(key, limit)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then return nil, false end
  if not v then return 0, false end
  local x = tonumber(v)
  if not x or x ~= x or x < 0 or x > limit or x % 1 ~= 0 then return 0, true end
  return x, false
end

local function ttl(us)
  return (us + 999 - math.fmod(us + 999, 1000)) / 1000 + 1 + slack
end

local nargs = #ARGV
while a <= nargs do
  local kind, maxDelay, nr = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  a = a + 3
  local base = n + 1
  local first = KEYS[k]
  out[base], out[base + 1] = 1, 0
  n = base + 1
  local code, repaired, bit = 1, 0, 1
  local allowed, act, anyBucket = true, 0, false
  local rules = {}
  for r = 1, nr do
    local typ = tonumber(ARGV[a])
    local ru = {typ = typ}
    if typ == 1 then
      ru.tol, ru.need, ru.mark = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
      a = a + 4
      ru.key = KEYS[k]
      k = k + 1
      local tat, bad = readNumber(ru.key, now + maxAhead)
      if not tat then
        if code == 1 then code = -r end
        tat = 0
      elseif bad then
        repaired = repaired + bit
        ru.repair = true
      end
      ru.tat = tat
      local rel = 0
      if tat > now then rel = tat - now end
      ru.rel = rel
      local wait = rel + ru.need - ru.tol
      if wait > 0 and wait > maxDelay then allowed = false end
      anyBucket = true
      if ru.mark - ru.tol > act then act = ru.mark - ru.tol end
      out[n + 1], out[n + 2] = rel, 0
    else
      ru.tokens, ru.cost = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
      local b0, b1, b2 = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
      ru.mark = tonumber(ARGV[a + 6])
      a = a + 7
      local which = -1
      if kind == 3 or kind == 2 then
        which = 0
      elseif now >= b1 and now < b2 then
        which = 1
      elseif now >= b0 and now < b1 then
        which = 0
      end
      ru.keys = {KEYS[k], KEYS[k + 1]}
      k = k + 2
      local used = 0
      if which < 0 then
        if code == 1 then code = -1000 - r end
      else
        ru.key = ru.keys[which + 1]
        if which == 0 then ru.endAt = b1 else ru.endAt = b2 end
        local u, bad = readNumber(ru.key, 1e15)
        if not u then
          if code == 1 then code = -r end
        else
          used = u
          if bad then
            repaired = repaired + bit
            ru.repair = true
          end
        end
      end
      ru.used = used
      if used + ru.cost > ru.tokens then allowed = false end
      out[n + 1], out[n + 2] = used, math.max(which, 0)
    end
    rules[r] = ru
    n = n + 2
    bit = bit * 2
  end
  out[base + 1] = repaired
  if code ~= 1 then
    out[base] = code
  elseif kind == 0 then
    if allowed then
      for r = 1, nr do
        local ru = rules[r]
        if ru.typ == 1 then
          local ahead = ru.rel + ru.need
          redis.call('SET', ru.key, now + ahead, 'PX', ttl(ahead))
        else
          if ru.repair then redis.call('DEL', ru.key) end
          redis.call('INCRBY', ru.key, ru.cost)
          redis.call('PEXPIRE', ru.key, ttl(ru.endAt - now))
        end
      end
    else
      out[base] = 0
      -- A repaired key is written back valid even when denied.
      for r = 1, nr do
        if rules[r].repair then redis.call('DEL', rules[r].key) end
      end
    end
  elseif kind == 1 then
    if not allowed then out[base] = 0 end
  elseif kind == 2 then
    for r = 1, nr do
      local ru = rules[r]
      if ru.typ == 1 then
        redis.call('DEL', ru.key)
      else
        redis.call('DEL', ru.keys[1], ru.keys[2])
      end
    end
    if first then redis.call('PUBLISH', channel, first) end
  else
    -- Cancel: nothing once the reserved time has come, or for an Op
    -- without a token bucket (quotas never reserve).
    if not anyBucket or now >= act then
      out[base] = 0
    else
      local gave = false
      for r = 1, nr do
        local ru = rules[r]
        local j = base + 2 * r
        if ru.typ == 1 then
          local tat = math.max(ru.tat, now)
          local back = math.min(ru.need, ru.need - (tat - ru.mark))
          if back > 0 then
            gave = true
            tat = tat - back
            if tat <= now then
              redis.call('DEL', ru.key)
              out[j] = 0
            else
              redis.call('SET', ru.key, tat, 'PX', ttl(tat - now))
              out[j] = tat - now
            end
          end
        else
          local back = math.min(ru.cost, ru.used)
          if back > 0 then
            gave = true
            redis.call('INCRBY', ru.key, -back)
            out[j] = ru.used - back
          end
        end
      end
      if gave then redis.call('PUBLISH', channel, first) else out[base] = 0 end
    end
  end
end
return out
`

// scriptSHA names the script in EVALSHA.
var scriptSHA = redis.NewScript(opScript).Hash()

// maxKeysPerScript bounds the keys of one script call, so that Redis, which
// runs one script at a time, is never held for long.
const maxKeysPerScript = 256

// Op kinds and rule types as the script numbers them.
const (
	ruleBucket = 1
	ruleQuota  = 2
)

// A group is the calls one script call carries, by their index in the batch.
type group struct {
	idx []int
	cmd *redis.Cmd
}

// exec runs one batch: one script call per group in a single pipeline (or a
// plain call when there is one group). Calls whose script cache was empty
// (after a restart, a failover or SCRIPT FLUSH) are sent again with EVAL,
// which runs and caches the script; a NOSCRIPT reply means the script did
// not run, so nothing is taken twice. exec writes nothing into the calls'
// answers, because their callers may have given up meanwhile; it returns the
// script's reply per group and the first error.
//
// ctx never expires (see roundTrip): a round trip always finishes on its
// connection, so a caller that gives up never costs a connection.
func (s *Store) exec(ctx context.Context, batch []*call, epoch *epochCheck) ([]group, error) {
	now := ""
	if s.scriptClock != nil {
		now = strconv.FormatInt(s.scriptClock().UnixMicro(), 10)
	}
	groups := s.group(batch)
	send := func(g *group, c redis.Scripter, eval bool) {
		nkeys := 0
		for _, j := range g.idx {
			nkeys += len(batch[j].keys)
		}
		keys := make([]string, 0, nkeys)
		args := make([]any, 2, 2+nkeys*5)
		args[0], args[1] = now, s.channel
		for _, j := range g.idx {
			keys, args = batch[j].appendScript(keys, args)
		}
		if eval {
			g.cmd = c.Eval(ctx, opScript, keys, args...)
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
		if len(todo) == 1 && (epoch == nil || eval) {
			send(todo[0], s.client, eval)
			continue
		}
		pipe := s.client.Pipeline()
		for _, g := range todo {
			send(g, pipe, eval)
		}
		if epoch != nil && !eval {
			epoch.queue(ctx, pipe, s)
		}
		_, _ = pipe.Exec(ctx) // errors are read from each command
	}
	var first error
	for i := range groups {
		if err := groups[i].cmd.Err(); err != nil && first == nil {
			first = err
		}
	}
	return groups, first
}

// group splits a batch into script calls. A plain client takes any keys in
// one call. Redis Cluster runs a script only over keys of one slot, so calls
// are grouped by slot (go-redis then sends each to its node); every key of
// one Op shares the tenant's hash tag, hence its slot. Any other client (a
// Ring, a wrapper) gets one Op per call, the only shape that is safe
// whatever its sharding.
func (s *Store) group(batch []*call) []group {
	var groups []group
	add := func(idx []int) {
		keys := 0
		start := 0
		for i, j := range idx {
			n := len(batch[j].keys)
			if keys+n > maxKeysPerScript && i > start {
				groups = append(groups, group{idx: idx[start:i:i]})
				start, keys = i, 0
			}
			keys += n
		}
		groups = append(groups, group{idx: idx[start:]})
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
			sl := slot(c.tenant)
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

// replies splits a group's flat reply into the slices of its calls: the
// server's now, then each call's code, repaired mask and two numbers per
// rule.
func replies(g *group, batch []*call) (now int64, per [][]int64, err error) {
	vals, err := g.cmd.Int64Slice()
	if err != nil {
		return 0, nil, err
	}
	if len(vals) == 0 {
		return 0, nil, errors.New("the script answered nothing")
	}
	now, vals = vals[0], vals[1:]
	per = make([][]int64, len(g.idx))
	for i, j := range g.idx {
		n := 2 + 2*len(batch[j].op.Rules)
		if len(vals) < n {
			return 0, nil, fmt.Errorf("the script answered %d values, too few for its %d Ops", len(vals), len(g.idx))
		}
		per[i], vals = vals[:n:n], vals[n:]
	}
	if len(vals) != 0 {
		return 0, nil, fmt.Errorf("the script answered %d values too many", len(vals))
	}
	return now, per, nil
}
