-- admin.lua keeps the Limiter's overrides and change log, which every
-- replica reads: the Limiter encodes them; the script only stores them and
-- moves a version on with each change, so that a replica reads them again
-- only when they changed.
--
-- KEYS: the overrides (a hash, tenant -> override), the change log (a
-- list, newest first) and the version (a counter).
-- ARGV[1] is the action:
--   "load" VERSION         -> {version} if it is VERSION, else
--                             {version, overrides as HGETALL, log}
--   "save" TENANT VALUE NOTE   sets TENANT's override, or removes it if
--                             VALUE is "", and logs NOTE unless it is "" -> {version}
--   "note" NOTE            logs NOTE -> {version}
-- The log keeps the newest MAXNOTES (ARGV[2] of "save" and "note" follows
-- the action's own arguments).

local call = redis.call
local action = ARGV[1]

if action == 'load' then
  local version = call('GET', KEYS[3]) or '0'
  if version == ARGV[2] then
    return {version}
  end
  return {version, call('HGETALL', KEYS[1]), call('LRANGE', KEYS[2], 0, -1)}
end

local note, keep
if action == 'save' then
  if ARGV[3] == '' then
    call('HDEL', KEYS[1], ARGV[2])
  else
    call('HSET', KEYS[1], ARGV[2], ARGV[3])
  end
  note, keep = ARGV[4], tonumber(ARGV[5])
elseif action == 'note' then
  note, keep = ARGV[2], tonumber(ARGV[3])
else
  return redis.error_reply('admin.lua: unknown action ' .. tostring(action))
end
if note ~= '' then
  call('LPUSH', KEYS[2], note)
  call('LTRIM', KEYS[2], 0, keep - 1)
end
return {tostring(call('INCR', KEYS[3]))}
