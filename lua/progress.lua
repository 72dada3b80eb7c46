-- Scope progress clock for the stall guard (docs/behaviour.md §5.2): global across processes because it is the
-- Redis server clock.
--
-- KEYS[1] progress STRING = server ms of the last successful call in the scope
-- ARGV[1] = 'mark', ARGV[2] = key ttl ms -> 1
--         = 'age'                       -> ms since the last mark, or -1 if never marked (or expired)
-- lua/attempt.lua calls this script as a function and passes the server time it already read as
-- `ARGV.now`.

local now = ARGV.now
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

if ARGV[1] == 'mark' then
  -- Never move backwards (a slow caller may mark after a faster one): the rare mark that finds a
  -- later one puts it back.
  local ttl = tonumber(ARGV[2])
  local prev = redis.call('SET', KEYS[1], now, 'PX', ttl, 'GET')
  if prev and tonumber(prev) > now then
    redis.call('SET', KEYS[1], prev, 'PX', ttl)
  end
  return 1
elseif ARGV[1] == 'age' then
  local prev = redis.call('GET', KEYS[1])
  if not prev then
    return -1
  end
  return math.max(0, now - tonumber(prev))
end

return redis.error_reply('progress.lua: unknown operation ' .. tostring(ARGV[1]))
