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
// tenant. Tests pass their own clock, which does not run with the server's,
// so their keys get ten more minutes to live lest they expire before the
// test's time has reached the end of their TTL. Then, for each Op: a header,
// kind + 8 x rules, where kind is 0 take, 1 inspect, 2 reset, 3 cancel, and
// 4 more for a take or inspect with a MaxDelay (in microseconds, the next
// argument); and for each rule either
//
//	tolerance, need [, mark]                  a token bucket: one key
//	-(2 x tokens + w), cost, b0, b1, b2 [, mark]  a quota: one key
//
// with the mark for a cancel only. tolerance is Burst x token interval and
// need cost x token interval, integers computed in Go, so the script only
// adds, subtracts and compares integers below 2^53, which Lua's doubles hold
// exactly. A bucket's key holds its theoretical arrival time (TAT) in
// microseconds since the Unix epoch; a missing key is a full bucket. A
// quota's candidate periods are [b0, b1) and [b1, b2), computed in Go
// around its own clock, and its key is that of period w (0 or 1), the one
// that holds the Store's clock; the period that holds the server's now is
// used, so boundaries are decided on Redis's clock, and in the rare case
// that it is the other one (clocks apart across a boundary), the script
// derives that period's key from the one it got: the same hash tag, so the
// same slot. A quota key holds the tokens used in its period and expires
// when the period ends.
//
// Keys are isolated: a key of another type fails its own Op only (nothing
// written for that Op), and a string that is not a valid state (garbage, a
// negative number, a TAT further ahead than twice tollgate.MaxWindow) is
// read as a full bucket or an unused quota, repaired by the Op's writes, and
// reported.
//
// The reply is flat: the server's now, then for each Op a code and one
// number per rule. The code is 1 (granted and written) or 0 (denied, or
// nothing to do) plus 4 x a bit mask of the rules whose state was repaired;
// or -r when the key of rule r has another type, -1000-r when the clock is
// outside rule r's periods. A bucket's number is rel, how far its TAT was
// ahead of now (0 for a full bucket); a quota's is 2 x the tokens used in
// the period + which of the two periods (0 or 1). Take and inspect report
// the state before the request, cancel the state after it. A denied Op
// writes nothing.
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
local channel = ARGV[2]
local maxTAT = now + 6307200000000000
local fmt = string.format
local out = {now}
local k, a, n = 1, 3, 1
local typ, key, keyA, keyB, tol, need, mark, st, fix, endAt = {}, {}, {}, {}, {}, {}, {}, {}, {}, {}

local function read(rk, limit)
  local v = redis.pcall('GET', rk)
  if not v then return 0, false end
  if type(v) == 'table' then return nil, false end
  local x = tonumber(v)
  if not x or x ~= x or x < 0 or x > limit or x % 1 ~= 0 then return 0, true end
  return x, false
end

-- period returns the key of the period that starts at start (µs) of the
-- quota whose key, for another period, is qk.
local function period(qk, start)
  return string.sub(qk, 1, #qk - #string.match(qk, '%d+$')) .. fmt('%d', start / 1000000)
end

local nargs = #ARGV
while a <= nargs do
  local h = tonumber(ARGV[a])
  a = a + 1
  if h == 8 and tonumber(ARGV[a]) >= 0 then
  -- The common case, a take from one token bucket without MaxDelay: the
  -- general path below, unrolled.
  local tl, nd = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  a = a + 2
  local rk = KEYS[k]
  k = k + 1
  local base = n + 1
  n = base + 1
  local v = redis.pcall('GET', rk)
  local tat, fixed = 0, false
  if v and type(v) == 'table' then
    out[base], out[n] = -1, 0
  else
    if v then
      local x = tonumber(v)
      if not x or x ~= x or x < 0 or x > maxTAT or x % 1 ~= 0 then fixed = true else tat = x end
    end
    local rel = 0
    if tat > now then rel = tat - now end
    out[n] = rel
    if rel + nd <= tl then
      local ahead = rel + nd
      redis.call('SET', rk, fmt('%d', now + ahead), 'PX', fmt('%d', (ahead + 999 - (ahead + 999) % 1000) / 1000 + 1 + slack))
      out[base] = 1
    else
      out[base] = 0
      if fixed then redis.call('DEL', rk) end
    end
    if fixed then out[base] = out[base] + 4 end
  end
  else
  local kind, maxDelay = h % 8, 0
  local nr = (h - kind) / 8
  if kind >= 4 then
    kind = kind - 4
    maxDelay = tonumber(ARGV[a])
    a = a + 1
  end
  local base = n + 1
  local first = KEYS[k]
  n = base
  local code, repaired, bit = 1, 0, 1
  local allowed, act, anyBucket = true, 0, false
  for r = 1, nr do
    local tl = tonumber(ARGV[a])
    fix[r] = false
    if tl >= 0 then
      typ[r] = 1
      local nd, mk = tonumber(ARGV[a + 1]), 0
      a = a + 2
      if kind == 3 then
        mk = tonumber(ARGV[a])
        a = a + 1
      end
      local rk = KEYS[k]
      k = k + 1
      local tat, bad = read(rk, maxTAT)
      if not tat then
        if code == 1 then code = -r end
        tat = 0
      elseif bad then
        repaired = repaired + bit
        fix[r] = true
      end
      local rel = 0
      if tat > now then rel = tat - now end
      key[r], tol[r], need[r], mark[r], st[r] = rk, tl, nd, mk, tat
      local wait = rel + nd - tl
      if wait > 0 and wait > maxDelay then allowed = false end
      anyBucket = true
      if mk - tl > act then act = mk - tl end
      out[n + 1] = rel
    else
      typ[r] = 2
      local w = -tl % 2
      local tokens, cost = (-tl - w) / 2, tonumber(ARGV[a + 1])
      local b0, b1, b2 = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
      a = a + 5
      if kind == 3 then
        mark[r] = tonumber(ARGV[a])
        a = a + 1
      end
      local which = -1
      if kind >= 2 then
        which = w
      elseif now >= b1 and now < b2 then
        which = 1
      elseif now >= b0 and now < b1 then
        which = 0
      end
      local kw = KEYS[k]
      k = k + 1
      keyA[r] = kw
      if w == 0 then keyB[r] = b1 else keyB[r] = b0 end
      local used = 0
      if which < 0 then
        if code == 1 then code = -1000 - r end
        key[r] = kw
      else
        if which == 0 then endAt[r] = b1 else endAt[r] = b2 end
        if which == w then
          key[r] = kw
        elseif which == 0 then
          key[r] = period(kw, b0)
        else
          key[r] = period(kw, b1)
        end
        local u, bad = read(key[r], 1e15)
        if not u then
          if code == 1 then code = -r end
        else
          used = u
          if bad then
            repaired = repaired + bit
            fix[r] = true
          end
        end
      end
      tol[r], need[r], st[r] = tokens, cost, used
      if used + cost > tokens then allowed = false end
      if which < 0 then which = 0 end
      out[n + 1] = used * 2 + which
    end
    n = n + 1
    bit = bit * 2
  end
  out[base] = 1 + 4 * repaired
  if code ~= 1 then
    out[base] = code
  elseif kind == 0 then
    if allowed then
      for r = 1, nr do
        if typ[r] == 1 then
          local ahead = st[r] - now
          if ahead < 0 then ahead = 0 end
          ahead = ahead + need[r]
          redis.call('SET', key[r], fmt('%d', now + ahead), 'PX', fmt('%d', (ahead + 999 - (ahead + 999) % 1000) / 1000 + 1 + slack))
        else
          if fix[r] then redis.call('DEL', key[r]) end
          redis.call('INCRBY', key[r], need[r])
          if st[r] == 0 then
            -- A new period's key: it expires when the period ends.
            local left = endAt[r] - now
            redis.call('PEXPIRE', key[r], (left + 999 - (left + 999) % 1000) / 1000 + 1 + slack)
          end
        end
      end
    else
      out[base] = 4 * repaired
      -- A repaired key is written back valid even when denied.
      for r = 1, nr do
        if fix[r] then redis.call('DEL', key[r]) end
      end
    end
  elseif kind == 1 then
    if not allowed then out[base] = 4 * repaired end
  elseif kind == 2 then
    for r = 1, nr do
      if typ[r] == 1 then
        redis.call('DEL', key[r])
      else
        redis.call('DEL', keyA[r], period(keyA[r], keyB[r]))
      end
    end
    if first then redis.call('PUBLISH', channel, first) end
  else
    -- Cancel: nothing once the reserved time has come, or for an Op
    -- without a token bucket (quotas never reserve).
    local gave = false
    if anyBucket and now < act then
      for r = 1, nr do
        local j = base + r
        if typ[r] == 1 then
          local tat = st[r]
          if tat < now then tat = now end
          local back = math.min(need[r], need[r] - (tat - mark[r]))
          if back > 0 then
            gave = true
            tat = tat - back
            if tat <= now then
              redis.call('DEL', key[r])
              out[j] = 0
            else
              local left = tat - now
              redis.call('SET', key[r], fmt('%d', tat), 'PX', fmt('%d', (left + 999 - (left + 999) % 1000) / 1000 + 1 + slack))
              out[j] = left
            end
          end
        else
          local back = math.min(need[r], st[r])
          if back > 0 then
            gave = true
            redis.call('INCRBY', key[r], -back)
            out[j] = (st[r] - back) * 2
          end
        end
      end
    end
    if gave then redis.call('PUBLISH', channel, first) else out[base] = 4 * repaired end
  end
  end
end
return out
`

// scriptSHA names the script in EVALSHA; script is opScript as a variable,
// so that a pointer to it is a command argument that costs no allocation.
var (
	scriptSHA = redis.NewScript(opScript).Hash()
	script    = opScript
)

// maxKeysPerScript bounds the keys of one script call, so that Redis, which
// runs one script at a time, is never held for long.
const maxKeysPerScript = 256

// A group is the calls one script call carries, by their index in the batch.
type group struct {
	idx   []int
	nkeys int64
	cmd   *redis.IntSliceCmd
}

// A processor runs or queues a command: a client or a pipeline.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// A scratch holds the buffers of a round trip, kept by its runner for the
// next one.
type scratch struct {
	args   []any
	idx    []int
	groups []group
}

// exec runs one batch: one script call per group in a single pipeline (or a
// plain call when there is one group). Calls whose script cache was empty
// (after a restart, a failover or SCRIPT FLUSH) are sent again with EVAL,
// which runs and caches the script; a NOSCRIPT reply means the script did
// not run, so nothing is taken twice. exec writes nothing into the calls'
// answers, because their callers may have given up meanwhile; it returns the
// script's reply per group and the first error.
//
// The command's arguments point into the calls (their keys and numbers), so
// that a decision costs no allocation for them; a call is not reused before
// its round trip is over (see call.reusable).
//
// ctx never expires (see roundTrip): a round trip always finishes on its
// connection, so a caller that gives up never costs a connection.
func (s *Store) exec(ctx context.Context, batch []*call, epoch *epochCheck, sc *scratch) ([]group, error) {
	var now any = ""
	if s.scriptClock != nil {
		now = strconv.FormatInt(s.scriptClock().UnixMicro(), 10)
	}
	groups := s.group(batch, sc)
	args := sc.args[:0]
	send := func(g *group, c processor, eval bool) {
		nkeys := 0
		for _, j := range g.idx {
			nkeys += len(batch[j].keys)
		}
		g.nkeys = int64(nkeys)
		start := len(args)
		if eval {
			args = append(args, "eval", &script)
		} else {
			args = append(args, "evalsha", &scriptSHA)
		}
		args = append(args, &g.nkeys)
		for _, j := range g.idx {
			c := batch[j]
			for k := range c.keys {
				args = append(args, &c.keys[k])
			}
		}
		args = append(args, now, &s.channel)
		for _, j := range g.idx {
			c := batch[j]
			for k := range c.args {
				args = append(args, &c.args[k])
			}
		}
		g.cmd = redis.NewIntSliceCmd(ctx, args[start:len(args):len(args)]...)
		if nkeys > 0 {
			g.cmd.SetFirstKeyPos(3)
		}
		_ = c.Process(ctx, g.cmd)
	}
	todo := make([]*group, 0, 4)
	for attempt := range 2 {
		eval := attempt == 1
		todo = todo[:0]
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
		if _, err := pipe.Exec(ctx); err != nil {
			// Errors are read from each command, but a connection that
			// failed to start (AUTH, SELECT) may leave them unset.
			for _, g := range todo {
				if g.cmd.Err() == nil && g.cmd.Val() == nil {
					g.cmd.SetErr(err)
				}
			}
		}
	}
	clear(args) // the calls may be reused: keep no pointer to them
	sc.args = args[:0]
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
func (s *Store) group(batch []*call, sc *scratch) []group {
	groups := sc.groups[:0]
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
		idx := sc.idx[:0]
		for i := range batch {
			idx = append(idx, i)
		}
		sc.idx = idx
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
		for i := range batch {
			groups = append(groups, group{idx: []int{i}})
		}
	}
	sc.groups = groups
	return groups
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// reply checks a group's flat reply, the server's now and then each call's
// code and one number per rule, and returns the now and the calls' part.
func reply(g *group, batch []*call) (now int64, vals []int64, err error) {
	if err := g.cmd.Err(); err != nil {
		return 0, nil, err
	}
	vals = g.cmd.Val()
	if len(vals) == 0 {
		return 0, nil, errors.New("the script answered nothing")
	}
	now, vals = vals[0], vals[1:]
	n := 0
	for _, j := range g.idx {
		n += 1 + batch[j].rules
	}
	if len(vals) != n {
		return 0, nil, fmt.Errorf("the script answered %d values for %d Ops that need %d", len(vals), len(g.idx), n)
	}
	return now, vals, nil
}
