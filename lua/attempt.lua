-- One attempt's governance in at most two round trips (docs/behaviour.md §5.3, §5.4): `admit` = breaker
-- check + six gates + lease, `finish` = breaker verdict (or force-open / probe release) + TPM
-- settlement + lease release + progress mark. One call runs a list of operations in order,
-- atomically: the finishes the runtime held back, then the next admission of the same scope — so
-- under load an attempt costs one round trip (its finish rides on a later admission).
--
-- The Rust side prepends lua/breaker.lua, lua/limiter.lua and lua/progress.lua, each wrapped as
-- `local function breaker(KEYS, ARGV) ... end` (`limiter`, `progress`), so this script drives the
-- very same code the single-purpose calls run — no second copy of a state machine. It reads the
-- server time once and hands it on as `ARGV.now`.
--
-- Operations: 7 KEYS each (every key of every operation shares the `{scope}` hash tag, so one
-- cluster slot), in this order:
--   1..5 the limiter keys (global leases, source leases, global window, source window, lease
--        record — see lua/limiter.lua)
--   6    the source's breaker HASH (see lua/breaker.lua)
--   7    the scope's progress STRING (see lua/progress.lua)
-- and their ARGV one after the other, each: 1 = operation, 2..8 = breaker parameters (effective
-- threshold, cooldown ms, max cooldown ms, probe ttl ms, min calls, fail rate, bucket ms), then:
--   admit   9 lease id (also the probe id), 10 lease ttl ms, 11 window ms, 12 est tokens,
--           13..18 limits (global conc, rpm, tpm, source conc, rpm, tpm; 0 = unlimited)
--           -> {1, window, est, epoch, probe id ('' = none)} admitted
--            | {0, gate, retry_after_ms} a gate refused (limiter.lua gate codes)
--            | {2, state, retry_after_ms} the breaker refused (breaker.lua state codes)
--   finish  9 lease id, 10 epoch, 11 probe id ('' = none), 12 action: 's' success | 'f' failure
--           | 'o' force open | 'n' no verdict, 13 tokens to settle, 14 progress ttl ms
--           ('0' = no progress mark)
--           -> {applied, state, retry_after_ms}: applied 1 | 0 already finished (a re-sent
--              finish changes nothing), then the breaker as the next admission will see it
--              (breaker.lua state codes; retry_after_ms > 0 only when open)
-- The reply is the last operation's.
--
-- Idempotency under re-sent scripts (fred may re-send an EVALSHA after a reconnect):
-- - a re-sent `admit` finds its lease record and answers the first admission (with the epoch and
--   probe stored there) without counting anything again;
-- - `finish` marks the lease record `fin` (kept 30 s even when the record had expired): the
--   lease id is the verdict id, so a re-sent verdict cannot count twice.

-- ARGV arity of each operation.
local ARITY = {admit = 18, finish = 14}

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- One operation over KEYS[k + 1 .. k + 7] and ARGV[a .. a + arity - 1].
local function run(op, k, a)
  local function arg(i)
    return ARGV[a + i - 1]
  end
  local lease_key = KEYS[k + 5]
  local breaker_keys = {KEYS[k + 6]}
  local limiter_keys = {KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], lease_key}

  -- ARGV of a breaker.lua call: `name`, the shared parameters, then `extra`.
  local function breaker_args(name, extra)
    local args = {name, now = now}
    for i = 2, 8 do
      args[i] = arg(i)
    end
    for _, v in ipairs(extra) do
      args[#args + 1] = v
    end
    return args
  end

  if op == 'admit' then
    local lease_id = arg(9)
    local prior = redis.call('HMGET', lease_key, 'w', 'est', 'exp', 'released', 'ep', 'pr')
    -- Re-sent (or overtaken by its release): answer the first admission, count nothing.
    if prior[4] == '1' or (prior[1] and tonumber(prior[3]) > now) then
      return {1, tonumber(prior[1] or 0), tonumber(prior[2] or 0), tonumber(prior[5] or 0),
              prior[6] or ''}
    end

    -- Breaker first: an open source spends no quota.
    local b = breaker(breaker_keys, breaker_args('acquire', {lease_id}))
    if b[1] == 2 then
      return {2, b[2], b[3]}
    end
    local epoch = b[2]
    local probe = ''
    if b[1] == 1 then
      probe = b[3]
    end

    -- The lease record was checked above (`fresh`); it stores the epoch and probe too.
    local g = limiter(limiter_keys, {'admit', lease_id, arg(10), arg(11), arg(12), arg(13),
                                     arg(14), arg(15), arg(16), arg(17), arg(18),
                                     now = now, fresh = true, record = {'ep', epoch, 'pr', probe}})
    if g[1] == 0 then
      -- A gate refused: hand the probe we just took back (nothing else was counted).
      if probe ~= '' then
        breaker(breaker_keys, breaker_args('release_probe', {probe}))
      end
      return g
    end
    return {1, g[2], g[3], epoch, probe}
  end

  -- finish
  local applied = limiter(limiter_keys, {'finish', arg(9), arg(13), now = now})
  -- A re-sent finish applies no verdict again; it only reports the breaker.
  local epoch, probe, action = arg(10), arg(11), arg(12)
  if applied == 0 then
    probe, action = '', 'n'
  end
  local b = breaker(breaker_keys, breaker_args('verdict', {epoch, probe, action}))
  if applied == 1 and arg(14) ~= '0' then
    progress({KEYS[k + 7]}, {'mark', arg(14), now = now})
  end
  return {applied, b[1], b[2]}
end

local reply
local k, a = 0, 1
while a <= #ARGV do
  local op = ARGV[a]
  local arity = ARITY[op]
  if not arity then
    return redis.error_reply('attempt.lua: unknown operation ' .. tostring(op))
  end
  reply = run(op, k, a)
  k, a = k + 7, a + arity
end
return reply
