-- Circuit breaker of one source (docs/behaviour.md §5.4), the same state machine as the in-memory
-- BreakerMachine (actors/src/policy/breaker.rs), stored in one hash so every process shares it.
-- Time is the Redis server clock (TIME).
--
-- KEYS[1] breaker HASH (KEYS[2], `record` only and optional: the verdict id STRING, see below):
--   st        'c' closed | 'o' open | 'h' half-open
--   epoch     opening epoch (every opening increments it; verdicts of older epochs are refused)
--   fails     consecutive failures (streak channel)
--   streak    open streak (grows the open duration)
--   until     OPEN: cooldown end, server ms
--   since     CLOSED: when it last closed, server ms (streak reset after 2x effective cooldown)
--   probe     HALF_OPEN: probe id held ('' = none); pexp = its lease expiry, server ms
--   b0i b0n b0f / b1i b1n b1f   the two window buckets: bucket index, samples, failures
--   opens     openings so far
--
-- ARGV: 1 op, 2 effective threshold, 3 cooldown ms, 4 max cooldown ms, 5 probe ttl ms,
--       6 min calls, 7 fail rate, 8 bucket ms, then per op:
--   acquire       9 candidate probe id  -> {0, epoch} pass | {1, epoch, probe id} probe |
--                                          {2, state, retry_after_ms} refused
--   record        9 epoch, 10 probe id ('' = none), 11 verdict 's'|'f' -> 1 applied | 0 refused
--   force_open                          -> epoch afterwards (an OPEN breaker is only extended)
--   release_probe 9 probe id            -> 1 released | 0 not held (idempotent)
--   snapshot                            -> {state, epoch, retry_after_ms, fails, streak,
--                                           probe_held, opens}
--   verdict       9 epoch, 10 probe id ('' = none), 11 action: 's' | 'f' record a verdict,
--                 'o' force open, 'n' none (each releases the probe) -> {state, retry_after_ms}
--                 afterwards (lua/attempt.lua's finish)
-- state codes: 0 closed, 1 open, 2 half-open.
--
-- Cost: a call reads only the fields its operation needs (HMGET) and writes only the fields that
-- changed; the key's 7-day expiry is refreshed by every write except one that only bumps
-- counters within a bucket (a new bucket, a new state or a probe refreshes it).
--
-- Re-sent calls (fred may re-send an EVALSHA after a dropped connection): `acquire` with the same
-- candidate probe id answers the probe again instead of refusing its own holder; `record` with a
-- verdict id (KEYS[2], unique per verdict, kept 30 s) answers a re-sent verdict with the
-- first answer and counts nothing; `release_probe` is idempotent; a re-sent `force_open` only
-- extends the deadline.
--
-- lua/attempt.lua runs this whole script as a function (KEYS and ARGV become its parameters), so
-- an admission and a finish drive the same state machine in one round trip; there the lease
-- record, not KEYS[2], makes the verdict count once, and `ARGV.now` carries the server time the
-- caller already read.

local key = KEYS[1]
local op = ARGV[1]
local threshold = tonumber(ARGV[2])
local cooldown = tonumber(ARGV[3])
local max_cooldown = tonumber(ARGV[4])
local probe_ttl = tonumber(ARGV[5])
local min_calls = tonumber(ARGV[6])
local fail_rate = tonumber(ARGV[7])
local bucket_ms = tonumber(ARGV[8])

local KEEP_MS = 7 * 24 * 3600 * 1000
-- How long a verdict id is remembered: 3 x the longest command timeout the client accepts (fred
-- never sends a script after its timeout; see TOMBSTONE_MS in lua/limiter.lua).
local VERDICT_KEEP_MS = 30000

local now = ARGV.now
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Admission, a probe release and a verdict-less finish only look at the state and the probe.
local STATE_FIELDS = {'st', 'epoch', 'until', 'probe', 'pexp'}
local ALL_FIELDS = {'st', 'epoch', 'fails', 'streak', 'until', 'since', 'probe', 'pexp',
                    'b0i', 'b0n', 'b0f', 'b1i', 'b1n', 'b1f', 'opens'}
local fields = ALL_FIELDS
if op == 'acquire' or op == 'release_probe' or (op == 'verdict' and ARGV[11] == 'n') then
  fields = STATE_FIELDS
end
local raw = redis.call('HMGET', key, unpack(fields))
local s = {}
for i, field in ipairs(fields) do
  if raw[i] then
    s[field] = raw[i]
  end
end
local function num(field)
  return tonumber(s[field] or '0')
end

local st = s.st or 'c'
local epoch = num('epoch')
local changed = {}

local function set(field, value)
  local text = tostring(value)
  if s[field] ~= text then
    s[field] = text
    changed[field] = true
  end
end

-- Fields that change within one bucket's life without refreshing the key's expiry.
local COUNTERS = {fails = true, b0n = true, b0f = true, b1n = true, b1f = true}

local function save()
  local flat = {}
  local refresh = false
  for field in pairs(changed) do
    flat[#flat + 1] = field
    flat[#flat + 1] = s[field]
    refresh = refresh or not COUNTERS[field]
  end
  if #flat > 0 then
    redis.call('HSET', key, unpack(flat))
    if refresh then
      redis.call('PEXPIRE', key, KEEP_MS)
    end
  end
  changed = {}
end

-- cooldown x 2^(streak-1), capped; a streak of 0 still opens for one cooldown.
local function effective_cooldown(streak)
  local d = cooldown
  local n = math.max(streak, 1) - 1
  while n > 0 and d < max_cooldown do
    d = d * 2
    n = n - 1
  end
  return math.min(d, max_cooldown)
end

local function clear_window()
  set('b0i', -1); set('b0n', 0); set('b0f', 0)
  set('b1i', -1); set('b1n', 0); set('b1f', 0)
end

-- Samples and failures in the two buckets covering now.
local function window()
  local idx = math.floor(now / bucket_ms)
  local n, f = 0, 0
  for b = 0, 1 do
    local bi = tonumber(s['b' .. b .. 'i'] or '-1')
    if bi == idx or bi == idx - 1 then
      n = n + num('b' .. b .. 'n')
      f = f + num('b' .. b .. 'f')
    end
  end
  return n, f
end

local function add_sample(failed)
  local idx = math.floor(now / bucket_ms)
  local b = 'b' .. (idx % 2)
  if tonumber(s[b .. 'i'] or '-1') ~= idx then
    set(b .. 'i', idx); set(b .. 'n', 0); set(b .. 'f', 0)
  end
  set(b .. 'n', num(b .. 'n') + 1)
  if failed then
    set(b .. 'f', num(b .. 'f') + 1)
  end
end

local function open(grow)
  local streak = num('streak')
  if grow then
    streak = streak + 1
    set('streak', streak)
  end
  epoch = epoch + 1
  set('epoch', epoch)
  st = 'o'
  set('st', 'o')
  set('until', now + effective_cooldown(streak))
  set('fails', 0)
  set('probe', ''); set('pexp', 0)
  set('opens', num('opens') + 1)
  clear_window()
end

local function close()
  st = 'c'
  set('st', 'c')
  set('since', now)
  set('fails', 0)
  set('probe', ''); set('pexp', 0)
  clear_window()
end

-- OPEN whose cooldown ended is HALF_OPEN.
local function advance()
  if st == 'o' and now >= num('until') then
    st = 'h'
    set('st', 'h')
    set('probe', ''); set('pexp', 0)
  end
end

local function probe_held()
  return st == 'h' and (s.probe or '') ~= '' and num('pexp') > now
end

local function state_code()
  if st == 'o' then return 1 elseif st == 'h' then return 2 end
  return 0
end

local function retry_after()
  if st == 'o' then return math.max(0, num('until') - now) end
  return 0
end

-- Apply one verdict of epoch `v_epoch` (probe id '' = none): 1 applied, 0 fenced off.
local function record(v_epoch, probe_id, failed)
  advance()
  -- Fencing: only verdicts of the current epoch apply; OPEN applies nothing.
  if v_epoch ~= epoch or st == 'o' then
    return 0
  end
  if st == 'h' then
    -- Only the stored probe decides (an expired probe nobody replaced still does).
    if probe_id == '' or (s.probe or '') ~= probe_id then
      return 0
    end
    if failed then
      open(true)
    else
      close()
    end
    return 1
  end
  -- CLOSED: every verdict of the current epoch is a sample, whatever its probe id.
  if failed then
    add_sample(true)
    local fails = num('fails') + 1
    set('fails', fails)
    local n, f = window()
    local enough = n >= min_calls
    -- Division, as the memory machine does, so 15/25 equals a configured 0.6 exactly.
    if enough and f / n >= fail_rate then
      open(true)
    elseif fails >= math.max(threshold, 1) and not enough then
      -- With enough samples the rate channel did not trip: the window is healthy and that
      -- evidence suppresses the streak channel.
      open(false)
    end
  else
    add_sample(false)
    set('fails', 0)
    local streak = num('streak')
    if streak > 0 and now >= num('since') + 2 * effective_cooldown(streak) then
      set('streak', 0)
    end
  end
  return 1
end

-- A dead source: open now (an OPEN breaker only has its deadline extended, keeping the epoch).
local function force_open()
  advance()
  if st == 'o' then
    local deadline = now + effective_cooldown(num('streak'))
    if deadline > num('until') then
      set('until', deadline)
    end
  else
    open(false)
  end
end

-- Give a probe back: true when `probe_id` held it.
local function release(probe_id)
  if (s.probe or '') ~= '' and s.probe == probe_id then
    set('probe', ''); set('pexp', 0)
    return true
  end
  return false
end

if op == 'acquire' then
  local candidate = ARGV[9]
  advance()
  local reply
  if st == 'c' then
    reply = {0, epoch}
  elseif st == 'o' then
    reply = {2, 1, retry_after()}
  elseif probe_held() then
    if s.probe == candidate then
      reply = {1, epoch, candidate}
    else
      reply = {2, 2, 0}
    end
  else
    set('probe', candidate)
    set('pexp', now + probe_ttl)
    reply = {1, epoch, candidate}
  end
  save()
  return reply

elseif op == 'record' then
  -- A verdict id (KEYS[2]) makes a re-sent verdict answer the first one instead of counting again.
  if KEYS[2] then
    local seen = redis.call('GET', KEYS[2])
    if seen then
      return tonumber(seen)
    end
  end
  local applied = record(tonumber(ARGV[9]), ARGV[10], ARGV[11] == 'f')
  save()
  if KEYS[2] then
    redis.call('SET', KEYS[2], applied, 'PX', VERDICT_KEEP_MS)
  end
  return applied

elseif op == 'force_open' then
  force_open()
  save()
  return epoch

elseif op == 'release_probe' then
  local released = release(ARGV[9])
  save()
  return released and 1 or 0

elseif op == 'verdict' then
  local action = ARGV[11]
  if action == 's' or action == 'f' then
    record(tonumber(ARGV[9]), ARGV[10], action == 'f')
  else
    if action == 'o' then
      force_open()
    end
    release(ARGV[10])
  end
  save()
  -- The state as the next admission will see it (an OPEN whose cooldown ended reads HALF_OPEN).
  advance()
  return {state_code(), retry_after()}

elseif op == 'snapshot' then
  -- Read-only: report the lazy OPEN -> HALF_OPEN view without writing it.
  advance()
  return {state_code(), epoch, retry_after(), num('fails'), num('streak'),
          probe_held() and 1 or 0, num('opens')}
end

return redis.error_reply('breaker.lua: unknown operation ' .. tostring(op))
