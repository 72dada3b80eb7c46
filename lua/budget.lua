-- Spend budgets (docs/behaviour.md §5.8): the budget gate of the limiter, one atomic call per
-- operation. The reference is actors/src/policy/budget.rs (BudgetLedger); the contract suite
-- (tests/contract/) runs the same cases against both.
--
-- Amounts are integer micro-units of the pricing currency. Windows are calendar-aligned UTC on
-- the Redis server clock (TIME): the hour, the day, the month; or fixed windows of `fixed_ms`
-- from the epoch (tests). Every key carries the one `{budget}` hash tag (a tenant's budget is
-- shared by all scopes, so budgets cannot live in a scope's slot): one cluster slot for all.
--
-- KEYS (reserve and settle): 1 reservation record HASH (est, exp, settled, w1..wn = the window
--   index counted in each budget), 2.. one budget HASH per claim: field <window index> = spent.
--   spent: KEYS[1] = the budget HASH.
--
-- ARGV[1] = operation:
--   reserve  2 ttl ms, 3 est micros, then per claim: limit micros, period ('h' | 'd' | 'm' |
--            'f'), fixed window ms (only read for 'f')
--            -> {1, w1, ..., wn} reserved | {0, claim number (1-based), limit, spent,
--               retry_after_ms} exhausted (nothing counted)
--   settle   2 actual micros -> 1 applied | 0 unknown, expired or already settled
--   spent    2 period, 3 fixed window ms -> {spent, resets_in_ms}
--
-- Idempotency: a re-sent `reserve` finds its record and answers the first reservation; `settle`
-- flips `settled` once. A record lives for the reservation's TTL (then the estimate stays
-- counted and a late settle is a no-op, as in memory) and 30 s once settled.

local op = ARGV[1]
local TOMBSTONE_MS = 30000
local HOUR_MS = 3600000
local DAY_MS = 86400000

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Howard Hinnant's civil calendar (as in actors/src/ports/budget.rs).
local function civil_from_days(days)
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
    - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400 + (m <= 2 and 1 or 0)
  return y, m
end

local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = m > 2 and m - 3 or m + 9
  local doy = math.floor((153 * mp + 2) / 5) + d - 1
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end

-- The window holding `now`: index, end ms.
local function window(period, fixed_ms)
  local len
  if period == 'h' then
    len = HOUR_MS
  elseif period == 'd' then
    len = DAY_MS
  elseif period == 'f' then
    len = math.max(1, tonumber(fixed_ms))
  elseif period == 'm' then
    local y, m = civil_from_days(math.floor(now / DAY_MS))
    local ny, nm = y, m + 1
    if m == 12 then ny, nm = y + 1, 1 end
    return y * 12 + (m - 1), days_from_civil(ny, nm, 1) * DAY_MS
  else
    return nil
  end
  local index = math.floor(now / len)
  return index, (index + 1) * len
end

local function spent_in(key, index)
  return tonumber(redis.call('HGET', key, tostring(index)) or '0')
end

if op == 'reserve' then
  local ttl_ms, est = tonumber(ARGV[2]), tonumber(ARGV[3])
  local n = #KEYS - 1
  local rec = KEYS[1]

  if redis.call('EXISTS', rec) == 1 then
    -- Re-sent: answer the first reservation, count nothing.
    local fields = {}
    for i = 1, n do fields[i] = 'w' .. i end
    local w = redis.call('HMGET', rec, unpack(fields))
    local reply = {1}
    for i = 1, n do reply[i + 1] = tonumber(w[i] or '0') end
    return reply
  end

  local windows, ends = {}, {}
  for i = 1, n do
    local a = 4 + (i - 1) * 3
    local limit = tonumber(ARGV[a])
    local index, end_ms = window(ARGV[a + 1], ARGV[a + 2])
    if not index then
      return redis.error_reply('budget.lua: unknown period ' .. tostring(ARGV[a + 1]))
    end
    local spent = spent_in(KEYS[i + 1], index)
    if spent >= limit or spent + est > limit then
      return {0, i, limit, spent, math.max(1, end_ms - now)}
    end
    windows[i], ends[i] = index, end_ms
  end

  local record = {'est', ARGV[3], 'exp', now + ttl_ms, 'settled', 0}
  local reply = {1}
  for i = 1, n do
    local key, field = KEYS[i + 1], tostring(windows[i])
    if redis.call('HINCRBY', key, field, ARGV[3]) == est then
      -- The first spend of this window here: drop older windows and keep the hash an hour
      -- past this window's end (nothing reads an older window).
      for _, f in ipairs(redis.call('HKEYS', key)) do
        if f ~= field then redis.call('HDEL', key, f) end
      end
      redis.call('PEXPIREAT', key, ends[i] + HOUR_MS)
    end
    record[#record + 1] = 'w' .. i
    record[#record + 1] = windows[i]
    reply[i + 1] = windows[i]
  end
  redis.call('HSET', rec, unpack(record))
  redis.call('PEXPIRE', rec, ttl_ms)
  return reply

elseif op == 'settle' then
  local rec = KEYS[1]
  local n = #KEYS - 1
  local head = redis.call('HMGET', rec, 'est', 'exp', 'settled')
  if not head[1] or head[3] == '1' or tonumber(head[2]) <= now then
    return 0
  end
  local est, actual = tonumber(head[1]), tonumber(ARGV[2])
  if actual ~= est then
    for i = 1, n do
      local field = redis.call('HGET', rec, 'w' .. i)
      -- A window that rolled out of the hash no longer refuses anyone: left alone.
      local cur = field and redis.call('HGET', KEYS[i + 1], field)
      if cur then
        redis.call('HSET', KEYS[i + 1], field, math.max(0, tonumber(cur) - est + actual))
      end
    end
  end
  redis.call('HSET', rec, 'settled', 1)
  redis.call('PEXPIRE', rec, TOMBSTONE_MS)
  return 1

elseif op == 'spent' then
  local index, end_ms = window(ARGV[2], ARGV[3])
  if not index then
    return redis.error_reply('budget.lua: unknown period ' .. tostring(ARGV[2]))
  end
  return {spent_in(KEYS[1], index), end_ms - now}
end

return redis.error_reply('budget.lua: unknown operation ' .. tostring(op))
