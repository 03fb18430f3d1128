-- apply.lua applies storekit.Ops, each to the rule states of one tenant,
-- each in one atomic step, on Redis's clock. An Op is storetest.Model in
-- Lua: read that first. One call carries the Ops of many tenants, so that
-- Redis runs the script, and reads its clock, once for all of them.
--
-- KEYS holds, per Op, the hash of its tenant, then the sorted set of each
-- of its in-flight caps, in the order of its rules. The hash's fields are
-- the rule names, its values the states:
--   a token bucket  "<sec>.<usec>"          its theoretical arrival time (TAT)
--   a quota         "<used>:<sec>.<usec>"   tokens used in the period ending then
-- A missing field is an empty state: a full bucket, an unused quota. The
-- field "~expires" holds the time, in milliseconds since 1970, that the
-- hash's TTL was last set to end at, so that an Op need not ask for it.
-- An in-flight cap's set holds the leases of the requests in flight, each
-- scored by when it expires, in microseconds since 1970; a missing set is
-- an empty one. The set expires when its last lease does, and a Reset,
-- which deletes the hash, leaves it alone: its requests still run.
--
-- ARGV: the clock ("" for TIME; tests pass a time), then per Op: kind
-- (storekit.Kind), cost, max delay (µs), mark (a Cancel's "<sec>.<usec>",
-- else ""), lease, lease TTL (µs), the number of rules n, their n names,
-- then per rule its burst, its interval (µs per token; 0 for a quota, -1
-- for an in-flight cap) and a quota's period as the client computed it,
-- start and end ("" for the others).
--
-- Reply: now (sec, usec), then per Op a list: 0, allowed (0/1), delay
-- (µs), then per rule allowed, remaining, retry after and reset after
-- (µs), then the names of the states that were not valid and were removed,
-- for the client to log; or 1 if a quota's period does not hold now (the
-- client computes the periods again at this now and retries); or 2 and
-- the error of a key that is not a hash.
--
-- Lua numbers are doubles: every sum below stays under 2^53. Times are
-- kept relative to now; an absolute time in microseconds since 1970 plus a
-- reservation of a hundred years would not. A lease's expiry is absolute,
-- as a set's scores must be: now plus a TTL of at most a century.

-- Every command goes through call or pcall; the test of declared keys
-- replaces this line with wrappers that fail on any key not in KEYS.
local call, pcall = redis.call, redis.pcall
local tonumber, floor, ceil, max, min = tonumber, math.floor, math.ceil, math.max, math.min
local format, match = string.format, string.match

-- none stands for the caps and leases of an Op that has no in-flight cap,
-- which most have: it is never written.
local none = {}

-- The fields an Op writes and deletes gather here, the first m_sets and
-- m_dels entries: every Op reuses the two tables instead of making its
-- own.
local sets, dels = {}, {}

-- bursts[i] and intervals[i] are rule i's figures as numbers, converted
-- once an Op; every Op reuses the two tables.
local bursts, intervals = {}, {}

-- No valid state lies further from now: a hundred years of burst and a
-- hundred years of reservation, with room to spare.
local horizon = 8e15

-- The least slack a key's TTL gets, in ms: a set of leases, and a hash,
-- whose longer slack has a tenant in steady use renew the TTL (a PEXPIRE)
-- every ten seconds instead of every second. A test's clock may run
-- slower than the one Redis expires keys by: its keys live an hour.
local slack, hash_slack = 1000, 10000

local now_sec, now_usec
if ARGV[1] == '' then
  local t = call('TIME')
  now_sec, now_usec = tonumber(t[1]), tonumber(t[2])
else
  local sec, usec = match(ARGV[1], '^(%d+)%.(%d+)$')
  now_sec, now_usec = tonumber(sec), tonumber(usec)
  slack, hash_slack = 3600000, 3600000
end

-- at returns a time "<sec>.<usec>" as microseconds from now, or nil if it
-- is not one or lies beyond the horizon.
local function at(s)
  local sec, usec = match(s, '^(%d+)%.(%d%d%d%d%d%d)$')
  if sec ~= nil and #sec <= 12 then
    local d = (tonumber(sec) - now_sec) * 1e6 + (tonumber(usec) - now_usec)
    if d <= horizon then
      return d
    end
  end
end

-- stamp returns the time d microseconds from now as "<sec>.<usec>",
-- exactly: d / 1e6 in doubles may round up to the next integer.
local function stamp(d)
  local us = now_usec + d
  local sec = floor(us / 1e6)
  us = us - sec * 1e6
  if us < 0 then
    sec, us = sec - 1, us + 1e6
  end
  return format('%d.%06d', now_sec + sec, us)
end

-- now_us is now in microseconds since 1970, as a set's scores count.
local now_us = format('%d', now_sec * 1e6 + now_usec)

-- expire_set sets the TTL of the sorted set of leases set to end when
-- its last lease expires.
local function expire_set(set)
  local last = call('ZRANGE', set, -1, -1, 'WITHSCORES')
  if last[2] then
    local left = (tonumber(last[2]) - now_sec * 1e6) - now_usec
    call('PEXPIRE', set, max(ceil(left / 1000), 0) + slack)
  end
end

-- apply applies the Op whose arguments start at ARGV[a] to the keys from
-- KEYS[k] on, and returns its reply and where the next Op's arguments and
-- keys start.
local function apply(k, a)
  local key = KEYS[k]
  -- Numbers are converted only where they are used, and kinds are
  -- compared as strings: a conversion costs Redis time, a comparison of
  -- strings next to none.
  local kind, cost, n = ARGV[a], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 6])
  local mark, lease = ARGV[a + 3], ARGV[a + 4]
  local names, figures = a + 6, a + 6 + n -- rule i: ARGV[names + i]; ARGV[figures + 4i - 3 ...]
  local next_op = figures + 4 * n + 1
  local take, max_delay = kind == '1', 0
  if take and ARGV[a + 2] ~= '0' then
    max_delay = tonumber(ARGV[a + 2])
  end

  -- caps[i] is the sorted set of rule i if it is an in-flight cap.
  local caps, held, next_key = none, none, k + 1
  for i = 1, n do
    if ARGV[figures + 4 * i - 2] == '-1' then
      if caps == none then
        caps, held = {}, {}
      end
      caps[i], next_key = KEYS[next_key], next_key + 1
    end
  end

  -- reply[r], r = 4i .. 4i+3, holds rule i's results in the end; until
  -- then reply[4i] holds a bucket's TAT - now, never below 0 (a past TAT
  -- is a full bucket), or a quota's tokens used, reply[4i+1] the time
  -- until their period ends and reply[4i+2] the end of the current period.
  local reply = { 0, 0, 0, nil, nil, nil, nil } -- room for one rule

  -- The quota periods must hold now, before anything is read or written.
  for i = 1, n do
    local f = figures + 4 * i - 3
    if ARGV[f + 1] == '0' then
      local s, e = at(ARGV[f + 2]), at(ARGV[f + 3])
      if s == nil or e == nil or s > 0 or e <= 0 then
        return { 1 }, next_op, next_key
      end
      reply[4 * i + 2] = e
    end
  end

  -- The read comes first: on a key of another type it fails before
  -- anything is written, and only this Op fails.
  local stored = pcall('HMGET', key, '~expires', unpack(ARGV, names + 1, names + n))
  if stored.err then
    return { 2, stored.err }, next_op, next_key
  end

  -- held[set] is how many leases of a cap are live; caps that name one
  -- set share it. Expired leases go first, and with them a key of
  -- another type fails the Op before anything is written.
  for i = 1, n do
    local set = caps[i]
    if set and not held[set] then
      local pruned = pcall('ZREMRANGEBYSCORE', set, '-inf', now_us)
      if type(pruned) == 'table' and pruned.err then
        return { 2, pruned.err }, next_op, next_key
      end
      held[set] = call('ZCARD', set)
    end
  end

  if kind == '3' then
    call('DEL', key)
    stored = {}
  end

  local invalid
  for i = 1, n do
    local v, used, left = stored[i + 1], 0, reply[4 * i + 2]
    if v and not caps[i] then
      if left == nil then
        local t = at(v)
        if t == nil then
          invalid = invalid or {}
          invalid[#invalid + 1] = ARGV[names + i]
        elseif t > 0 then
          used = t
        end
      else
        local us, es = match(v, '^(%d+):(.*)$')
        local u, e = us and #us <= 15 and tonumber(us), es and at(es)
        if not u or not e then
          invalid = invalid or {}
          invalid[#invalid + 1] = ARGV[names + i]
        elseif e > 0 then
          used, left = u, e
        end
      end
    end
    reply[4 * i], reply[4 * i + 1] = used, left
  end
  if invalid then
    call('HDEL', key, unpack(invalid))
  end

  -- A Release or a Cancel gives the lease's slot back; a Renew moves a
  -- live lease's expiry.
  local lease_end
  if caps ~= none then
    lease_end = format('%d', now_sec * 1e6 + now_usec + tonumber(ARGV[a + 5]))
  end
  if kind == '4' or kind == '8' or kind == '9' then
    for set in pairs(held) do
      if kind == '9' then
        if call('ZADD', set, 'XX', 'CH', lease_end, lease) == 1 then
          expire_set(set)
        end
      else
        held[set] = held[set] - call('ZREM', set, lease)
      end
    end
  end

  -- A Cancel whose reservation has not begun gives back what it took.
  local dirty = false
  if kind == '4' then
    local m = at(mark)
    dirty = m ~= nil and m > 0
  end

  local allowed, delay = true, 0
  for i = 1, n do
    local f = figures + 4 * i - 3
    local burst, interval, v = tonumber(ARGV[f]), tonumber(ARGV[f + 1]), reply[4 * i]
    bursts[i], intervals[i] = burst, interval
    if interval < 0 then
      allowed = allowed and held[caps[i]] < burst
    elseif interval > 0 then
      local need = cost * interval
      if dirty then
        v = max(v - need, 0)
      end
      local wait = (v - burst * interval) + need
      if wait > 0 then
        delay = max(delay, wait)
        allowed = allowed and wait <= max_delay
      end
    else
      if dirty then
        v = max(v - cost, 0)
      end
      allowed = allowed and v + cost <= burst
    end
    reply[4 * i] = v
  end
  local granted = take and allowed
  dirty = dirty or granted
  if allowed and (take or kind == '2') then
    reply[2], reply[3] = 1, delay
  end

  local m_sets, m_dels, keep = 0, 0, 0
  for i = 1, n do
    local burst, interval, v, left = bursts[i], intervals[i], reply[4 * i], reply[4 * i + 1]
    local ok, remaining, retry, reset, value
    if interval < 0 then
      ok, remaining, retry, reset = false, 0, 0, 0 -- below, once the slot is taken
    elseif interval > 0 then
      local tol, need = burst * interval, cost * interval
      if granted then
        v = v + need
      end
      local wait = max((v - tol) + need, 0)
      -- Whole tokens left: floor((tol - v) / interval), exactly.
      local room = max(tol - v, 0)
      remaining = floor(room / interval)
      if remaining * interval > room then
        remaining = remaining - 1
      end
      ok, retry, reset = granted or wait == 0, granted and 0 or wait, v
      if v > 0 then
        value = stamp(v)
      end
    else
      if granted then
        v, left = v + cost, reply[4 * i + 2]
      end
      local over = v + cost > burst
      ok, remaining, retry, reset = granted or not over, max(burst - v, 0), 0, 0
      if over and not granted then
        retry = left
      end
      if v > 0 then
        reset = left
        value = format('%d:%s', v, stamp(left))
      end
    end
    reply[4 * i], reply[4 * i + 1], reply[4 * i + 2], reply[4 * i + 3] = ok and 1 or 0, remaining, retry, reset
    if dirty and interval >= 0 then
      if value then
        sets[m_sets + 1], sets[m_sets + 2], m_sets = ARGV[names + i], value, m_sets + 2
        keep = max(keep, reset)
      else
        dels[m_dels + 1], m_dels = ARGV[names + i], m_dels + 1
      end
    end
  end

  if m_dels > 0 then
    call('HDEL', key, unpack(dels, 1, m_dels))
  end
  if m_sets > 0 then
    -- The hash expires when every state in it is empty, its other rules'
    -- too, so its TTL only grows; some slack spares most Ops the PEXPIRE.
    local ttl = ceil(keep / 1000)
    local now_ms = now_sec * 1000 + floor(now_usec / 1000)
    local expires = tonumber(stored[1])
    if expires == nil or expires < now_ms + ttl then
      ttl = ttl + max(min(ttl, 60000), hash_slack)
      sets[m_sets + 1], sets[m_sets + 2], m_sets = '~expires', format('%d', now_ms + ttl), m_sets + 2
      call('HSET', key, unpack(sets, 1, m_sets))
      call('PEXPIRE', key, ttl)
    else
      call('HSET', key, unpack(sets, 1, m_sets))
    end
  end

  -- A granted request holds one slot of each cap, whatever its cost. The
  -- hash is written first: a user that may not write it fails there, with
  -- no slot taken.
  if granted then
    for set in pairs(held) do
      held[set] = held[set] + call('ZADD', set, lease_end, lease)
      expire_set(set)
    end
  end
  for i = 1, n do
    if caps[i] then
      local burst, v = bursts[i], held[caps[i]]
      reply[4 * i], reply[4 * i + 1], reply[4 * i + 2], reply[4 * i + 3] = (granted or v < burst) and 1 or 0, max(burst - v, 0), 0, 0
    end
  end

  if invalid then
    for i = 1, #invalid do
      reply[#reply + 1] = invalid[i]
    end
  end
  return reply, next_op, next_key
end

local replies, a, k = { now_sec, now_usec }, 2, 1
while k <= #KEYS do
  replies[#replies + 1], a, k = apply(k, a)
end
return replies
