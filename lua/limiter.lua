-- Six-gate limiter (docs/behaviour.md §5.3): global/source x concurrency/RPM/TPM, one atomic call per operation.
--
-- Every key of one call carries the same `{scope}` hash tag (cluster-safe). Time is the Redis
-- server clock (TIME), so every process agrees on windows and lease expiry.
--
-- KEYS (all operations, same order):
--   1 global leases  ZSET  member = lease id, score = expiry ms
--   2 source leases  ZSET  same
--   3 global window  HASH  field "r:<w>" = requests, "t:<w>" = tokens in window w
--   4 source window  HASH  same
--   5 lease record   HASH  w = admission window, est = pre-deducted tokens, settled = 0|1,
--                          released = 0|1, exp = lease expiry ms, fin = 1 once an attempt
--                          finished; kept 30 s once both flags are set (a tombstone
--                          against re-sent admissions)
--
-- ARGV[1] = operation:
--   admit   ARGV: 2 lease id, 3 lease ttl ms, 4 window ms, 5 est tokens,
--                 6 global conc, 7 global rpm, 8 global tpm, 9 source conc, 10 source rpm,
--                 11 source tpm (0 = unlimited)
--           -> {1, window, est} admitted | {0, gate, retry_after_ms >= 1} refused
--              gate: 1 global conc, 2 source conc, 3 global rpm, 4 source rpm, 5 global tpm,
--                    6 source tpm
--   settle  ARGV: 2 actual tokens -> 1 applied | 0 already settled / unknown lease
--   release ARGV: 2 lease id -> number of slots freed (0 when already released or unknown;
--                 an unknown id leaves a tombstone)
--   finish  ARGV: 2 lease id, 3 actual tokens -> settle and release at once, and mark the record
--                 `fin`: 1 | 0 when the record was already finished (lua/attempt.lua)
--   held    (KEYS[1] only) -> live leases in the global gate
--
-- lua/attempt.lua calls this script as a function with three named fields in ARGV: `now` (the
-- server time it already read), `fresh` (it has checked the lease record for a re-sent
-- admission already) and `record` (fields to store in the lease record with the admission).
--
-- Cost: an admission reads and writes only what its limits need. Dead holders' leases are
-- reclaimed when a concurrency gate looks full and on the first admission of each window; a
-- window hash is pruned and its expiry set on the first admission of its window; a lease ZSET's
-- expiry only ever grows (PEXPIREAT GT / NX, Redis >= 7.0).
--
-- Idempotency: fred may re-send an EVALSHA after a dropped connection. A re-sent `admit` finds its
-- lease record and answers the original admission without counting again; `settle` flips the
-- record's `settled` flag once; `release` is a ZREM; `finish` counts once by its `fin` flag.

local op = ARGV[1]

-- How long a finished or tombstoned lease record is kept: 3 x the longest command timeout the
-- client accepts (src/redis/connection.rs), because fred never sends a script after its timeout —
-- only a stalled server can run one later. Every finished attempt leaves one such record, so this
-- is what a high call rate costs in memory: calls/s x 30 s small hashes.
local TOMBSTONE_MS = 30000

-- Longest hint for a full concurrency gate (policy/limiter.rs LEASE_POLL).
local LEASE_POLL_MS = 250

-- Every hint is at least 1 ms, as in the memory limiter.
local function refuse(gate, wait_ms)
  return {0, gate, math.max(1, wait_ms)}
end

local function now_ms()
  if ARGV.now then
    return ARGV.now
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Keep a window hash small: drop the fields of windows older than the previous one.
local function prune_windows(key, window)
  local old = {}
  for _, f in ipairs(redis.call('HKEYS', key)) do
    local w = tonumber(string.sub(f, 3))
    if w == nil or w < window - 1 then
      old[#old + 1] = f
    end
  end
  if #old > 0 then
    redis.call('HDEL', key, unpack(old))
  end
end

-- A lease ZSET outlives its latest lease by a second: its expiry only grows (GT), and a key
-- without one gets it (NX). `held` = its size before this lease when known: 0 means the ZADD
-- just created the key.
local function expire_leases(key, expiry, held)
  local at = expiry + 1000
  if held == 0 then
    redis.call('PEXPIREAT', key, at)
  elseif redis.call('PEXPIREAT', key, at, 'GT') == 0 then
    redis.call('PEXPIREAT', key, at, 'NX')
  end
end

-- Settle the lease whose record is `rec` = {w, est, settled, exp, ...} at `actual` tokens: the
-- admission window's TPM counts move by the difference. False when unknown, already settled,
-- or expired (a reclaimed lease is forgotten, as in memory).
local function settle(rec, actual, now)
  if not rec[1] or rec[3] == '1' or tonumber(rec[4]) <= now then
    return false
  end
  local delta = actual - tonumber(rec[2])
  if delta ~= 0 then
    local tf = 't:' .. rec[1]
    for i = 3, 4 do
      -- A window that already rolled out of the hash no longer gates anything.
      local cur = redis.call('HGET', KEYS[i], tf)
      if cur then
        redis.call('HSET', KEYS[i], tf, math.max(0, tonumber(cur) + delta))
      end
    end
  end
  return true
end

-- Free the lease's slots: how many it held (0, 1 or 2).
local function free(lease_id)
  return redis.call('ZREM', KEYS[1], lease_id) + redis.call('ZREM', KEYS[2], lease_id)
end

if op == 'admit' then
  local lease_id = ARGV[2]
  local ttl_ms = tonumber(ARGV[3])
  local window_ms = tonumber(ARGV[4])
  local est = tonumber(ARGV[5])
  local g_conc, g_rpm, g_tpm = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
  local s_conc, s_rpm, s_tpm = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])

  local now = now_ms()
  local window = math.floor(now / window_ms)
  local window_left = (window + 1) * window_ms - now

  -- A re-sent admission answers the original one and counts nothing. So does an admission whose
  -- lease was already released — including a release that arrived first because the caller timed
  -- out and gave the lease back before fred re-sent the admission after a reconnect: it holds no
  -- slot and must not take one (as in memory). A lease that expired is forgotten and admitted
  -- afresh.
  if not ARGV.fresh then
    local prior = redis.call('HMGET', KEYS[5], 'w', 'est', 'exp', 'released')
    if prior[4] == '1' then
      return {1, tonumber(prior[1] or window), tonumber(prior[2] or 0)}
    end
    if prior[1] and tonumber(prior[3]) > now then
      return {1, tonumber(prior[1]), tonumber(prior[2])}
    end
  end

  -- Concurrency hint: the scope's earliest lease expiry, capped by LEASE_POLL_MS because slots
  -- usually free on release long before any lease expires (mirrors policy/limiter.rs).
  local function lease_wait()
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
    local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    if not first[2] then
      return LEASE_POLL_MS
    end
    return math.min(math.floor(tonumber(first[2])) - now, LEASE_POLL_MS)
  end
  -- A gate that looks full first reclaims the leases whose holders died, then counts again:
  -- full?, and the count (nil when the gate is unlimited and was not counted).
  local function conc_full(key, limit)
    if limit <= 0 then
      return false, nil
    end
    local held = redis.call('ZCARD', key)
    if held < limit then
      return false, held
    end
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
    held = redis.call('ZCARD', key)
    return held >= limit, held
  end
  local g_full, g_held = conc_full(KEYS[1], g_conc)
  if g_full then return refuse(1, lease_wait()) end
  local s_full, s_held = conc_full(KEYS[2], s_conc)
  if s_full then return refuse(2, lease_wait()) end

  -- Requests and tokens so far in this window, read only where a limit needs them.
  local rf = 'r:' .. window
  local tf = 't:' .. window
  local function counts(key, rpm, tpm)
    if rpm <= 0 and tpm <= 0 then
      return 0, 0
    end
    local c = redis.call('HMGET', key, rf, tf)
    return tonumber(c[1] or '0'), tonumber(c[2] or '0')
  end
  local g_req, g_tok = counts(KEYS[3], g_rpm, g_tpm)
  local s_req, s_tok = counts(KEYS[4], s_rpm, s_tpm)
  if g_rpm > 0 and g_req + 1 > g_rpm then return refuse(3, window_left) end
  if s_rpm > 0 and s_req + 1 > s_rpm then return refuse(4, window_left) end
  if g_tpm > 0 and g_tok + est > g_tpm then return refuse(5, window_left) end
  if s_tpm > 0 and s_tok + est > s_tpm then return refuse(6, window_left) end

  -- All six passed: count them all.
  local expiry = now + ttl_ms
  redis.call('ZADD', KEYS[1], expiry, lease_id)
  redis.call('ZADD', KEYS[2], expiry, lease_id)
  expire_leases(KEYS[1], expiry, g_held)
  expire_leases(KEYS[2], expiry, s_held)

  local keep_ms = 2 * window_ms + 1000
  for i = 3, 4 do
    if redis.call('HINCRBY', KEYS[i], rf, 1) == 1 then
      -- The first admission of this window here: drop old windows, reclaim the dead holders'
      -- leases of the matching gate (an unlimited gate never looks full), and keep the hash
      -- through this window and the next.
      prune_windows(KEYS[i], window)
      redis.call('ZREMRANGEBYSCORE', KEYS[i - 2], '-inf', now)
      redis.call('PEXPIRE', KEYS[i], keep_ms)
    end
    redis.call('HINCRBY', KEYS[i], tf, ARGV[5])
  end

  -- The record lives until the lease is both released and settled (or, for a holder that died,
  -- until a window after the lease expiry).
  local record = {'w', window, 'est', ARGV[5], 'settled', 0, 'released', 0, 'exp', expiry}
  for _, v in ipairs(ARGV.record or {}) do
    record[#record + 1] = v
  end
  redis.call('HSET', KEYS[5], unpack(record))
  redis.call('PEXPIRE', KEYS[5], ttl_ms + keep_ms)
  return {1, window, est}

elseif op == 'settle' then
  local rec = redis.call('HMGET', KEYS[5], 'w', 'est', 'settled', 'exp', 'released')
  if not settle(rec, tonumber(ARGV[2]), now_ms()) then
    return 0
  end
  redis.call('HSET', KEYS[5], 'settled', 1)
  if rec[5] == '1' then
    redis.call('PEXPIRE', KEYS[5], TOMBSTONE_MS)
  end
  return 1

elseif op == 'release' then
  local freed = free(ARGV[2])
  -- Mark the record released (a tombstone when the admission has not arrived yet) so a late,
  -- re-sent admission of this id takes no slot. A finished record only lingers briefly.
  local settled = redis.call('HGET', KEYS[5], 'settled')
  redis.call('HSET', KEYS[5], 'released', 1)
  if settled == '1' or not settled then
    redis.call('PEXPIRE', KEYS[5], TOMBSTONE_MS)
  end
  return freed

elseif op == 'finish' then
  local rec = redis.call('HMGET', KEYS[5], 'w', 'est', 'settled', 'exp', 'fin')
  if rec[5] == '1' then
    return 0
  end
  settle(rec, tonumber(ARGV[3]), now_ms())
  free(ARGV[2])
  -- Finished (a tombstone when the admission has not arrived yet): kept briefly.
  redis.call('HSET', KEYS[5], 'settled', 1, 'released', 1, 'fin', 1)
  redis.call('PEXPIRE', KEYS[5], TOMBSTONE_MS)
  return 1

elseif op == 'held' then
  return redis.call('ZCOUNT', KEYS[1], '(' .. now_ms(), '+inf')
end

return redis.error_reply('limiter.lua: unknown operation ' .. tostring(op))
