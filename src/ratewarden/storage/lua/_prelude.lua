-- _prelude.lua: shared head of every rate script; the store prepends it to the
-- algorithm's script before loading. It mirrors ratewarden.algorithms._base.
--
-- Every rate script is called with
--   KEYS[i]   the state key of layer i (one per rate, all with one hash tag)
--   ARGV[1]   now in whole microseconds, or "" to read Redis TIME
--   ARGV[2]   cost (a whole number >= 0; 0 checks without consuming)
--   ARGV[3..] the algorithm's params for layer 1, then layer 2, ...
-- (or, with ARGV[2] = "all", several decisions at once: see layered below)
-- and replies
--   {now_us, allowed, then per layer: allowed, remaining, reset_after_us, retry_after_us, delay_us,
--    refill_after_us}
-- with retry_after_us = -1 when the cost can never be admitted, and refill_after_us the
-- effective window: were all of remaining used now, one more unit fits after exactly that
-- long (Outcome.refill_after_us in ratewarden.algorithms._base).
--
-- Numbers are Lua doubles; every value stays below 2^53, where they are exact
-- integers, so the results equal the Python reference bit for bit.

local NEVER = -1

local function now_us()
  if ARGV[1] ~= '' then
    return tonumber(ARGV[1])
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- floor(a / b) for whole a, b with b > 0; exact below 2^53
local function idiv(a, b)
  return math.floor(a / b)
end

-- ceil(a / b) for whole a, b with b > 0
local function ceil_div(a, b)
  local q = math.floor(a / b)
  if q * b < a then
    q = q + 1
  end
  return q
end

local function fmt(x)
  return string.format('%.0f', x)
end

-- With ARGV[1] set (an injected clock: tests, simulation) every TTL is at least this
-- long. Redis counts a TTL in its own real time, which may run ahead of the injected
-- clock, and a key that expired early would be read as rested. The state itself says
-- when it stops counting (each script judges it against now), so the TTL is only
-- garbage collection and a long one changes no answer.
local INJECTED_TTL_FLOOR_MS = 86400000

-- milliseconds for PEXPIRE / SET PX: rounded up, at least 1 (at least a day with an
-- injected clock)
local function ttl_ms(ttl_us)
  local ms = ceil_div(ttl_us, 1000)
  if ms < 1 then
    ms = 1
  end
  if ARGV[1] ~= '' and ms < INJECTED_TTL_FLOOR_MS then
    ms = INJECTED_TTL_FLOOR_MS
  end
  return ms
end

-- A state of whole numbers stored as "a b ..." (GCRA's "tat_us frac", the buckets'
-- "level last_us", the fixed window's "window count", the sliding window's three):
-- read it as a list, or nil; write it with a TTL.
local function state_read(key)
  local raw = redis.call('GET', key)
  if not raw then
    return nil
  end
  -- string.find, not string.gmatch: as fast as the two-number reader it replaced
  local state, at = {}, 1
  while true do
    local sep = string.find(raw, ' ', at, true)
    if not sep then
      state[#state + 1] = tonumber(string.sub(raw, at))
      return state
    end
    state[#state + 1] = tonumber(string.sub(raw, at, sep - 1))
    at = sep + 1
  end
end

local function state_write(key, state, ttl_us)
  local value = fmt(state[1])
  for i = 2, #state do
    value = value .. ' ' .. fmt(state[i])
  end
  redis.call('SET', key, value, 'PX', ttl_ms(ttl_us))
end

-- GCRA's step, shared by gcra.lua, gcra_multi.lua and fair_share.lua; it mirrors
-- ratewarden.algorithms.gcra.check.
local function gcra_check(p, state, now, cost)
  local n, d, capacity = p[1], p[2], p[3]
  local tat, frac = now, 0
  if state then
    tat, frac = state[1], state[2]
  end
  if tat < now then
    tat, frac = now, 0
  end
  local ahead = (tat - now) * n + frac
  local room = capacity * d
  local left = room - ahead
  if left < 0 then
    left = 0
  end
  local remaining = idiv(left, d)
  -- the next unit fits once the TAT, moved by the remaining units, is one T from full
  local refill = ceil_div(ahead + (remaining + 1) * d - room, n)
  if cost > capacity then
    return {0, remaining, ceil_div(ahead, n), NEVER, 0, refill}, state, 0
  end
  local after = ahead + cost * d
  if after > room then
    return {0, remaining, ceil_div(ahead, n), ceil_div(after - room, n), 0, refill}, state, 0
  end
  local total = frac + cost * d
  local reset = ceil_div(after, n)
  left = room - after
  refill = ceil_div(d - left % d, n)
  return {1, idiv(left, d), reset, 0, 0, refill}, {tat + idiv(total, n), total % n}, reset
end

-- The bucket of token_bucket.lua and leaky_bucket.lua: used units of capacity * d, draining
-- n units per microsecond since last (T = d/n microseconds, a request is d units). It mirrors
-- ratewarden.algorithms._bucket.step: returns the outcome, the units used after the request,
-- the time they count from, and their TTL (0 when denied: nothing to write). With shaper, an
-- admitted request's delay is its wait behind what is already in the bucket.
local function bucket_step(p, used, last, now, cost, shaper)
  local n, d, capacity = p[1], p[2], p[3]
  local room = capacity * d
  -- a clock behind last is held at last: nothing drains twice
  local lag = last - now
  if lag < 0 then
    lag = 0
  end
  local since = now + lag
  local elapsed = since - last
  -- compare with the time to empty before multiplying: elapsed * n stays below used
  if elapsed >= ceil_div(used, n) then
    used = 0
  else
    used = used - elapsed * n
  end
  local free = room - used
  -- taking the whole requests that fit leaves free % d; one more fits d - free % d later
  local refill = lag + ceil_div(d - free % d, n)
  local reset = lag + ceil_div(used, n)
  if cost > capacity then
    return {0, idiv(free, d), reset, NEVER, 0, refill}, used, since, 0
  end
  local need = cost * d
  if need > free then
    return {0, idiv(free, d), reset, lag + ceil_div(need - free, n), 0, refill}, used, since, 0
  end
  local delay = 0
  if shaper then
    -- the new request leaves once everything ahead of it has drained
    delay = reset
  end
  used = used + need
  free = room - used
  -- back to empty is the same as never seen: the store may forget the key then
  reset = lag + ceil_div(used, n)
  refill = lag + ceil_div(d - free % d, n)
  return {1, idiv(free, d), reset, 0, delay, refill}, used, since, reset
end

-- The layers in ARGV (the layout is layered()'s, below): take(i, at, cost) is called for
-- layer i, whose params start at ARGV[at], with its decision's cost. Returns an error reply
-- when ARGV's layers do not match KEYS, else nil.
local function layer_args(width, take)
  if ARGV[2] ~= 'all' then
    local cost = tonumber(ARGV[2])
    for i = 1, #KEYS do
      take(i, 3 + (i - 1) * width, cost)
    end
    return nil
  end
  local at, layer = 4, 0
  for _ = 1, tonumber(ARGV[3]) do
    local cost, count = tonumber(ARGV[at]), tonumber(ARGV[at + 1])
    at = at + 2
    for _ = 1, count do
      layer = layer + 1
      take(layer, at, cost)
      at = at + width
    end
  end
  if layer ~= #KEYS or at ~= #ARGV + 1 then
    return redis.error_reply('ERR ratewarden: ' .. layer .. ' layers in ARGV for ' .. #KEYS .. ' KEYS')
  end
  return nil
end

-- The layering loop of ratewarden.algorithms._base.layered_each: check every layer,
-- commit all or nothing; when any denies, re-check the allowing layers with
-- cost 0 so their reply shows the state actually kept.
--   read(key) -> state or nil
--   check(p, state, now, cost) -> outcome {allowed, remaining, reset, retry, delay, refill},
--                                 new_state, ttl_us
--   write(key, state, ttl_us)
-- ARGV[2] is the cost of every layer (one decision), or "all" for several decisions
-- of this algorithm decided together (``hit_all``): then ARGV[3] is their number and
-- each brings its cost, its number of layers and their params; KEYS hold every
-- decision's layers in the same order, and the reply lists them the same way.
local function layered(read, check, write, width)
  local now = now_us()
  local n = #KEYS
  local params, costs = {}, {}
  local bad = layer_args(width, function(i, at, cost)
    local p = {}
    for j = 1, width do
      p[j] = tonumber(ARGV[at + j - 1])
    end
    params[i], costs[i] = p, cost
  end)
  if bad then
    return bad
  end
  local states, outcomes, news, ttls = {}, {}, {}, {}
  local all = true
  for i = 1, n do
    states[i] = read(KEYS[i])
    outcomes[i], news[i], ttls[i] = check(params[i], states[i], now, costs[i])
    if outcomes[i][1] == 0 then
      all = false
    end
  end
  if all then
    for i = 1, n do
      if costs[i] > 0 then
        write(KEYS[i], news[i], ttls[i])
      end
    end
  else
    for i = 1, n do
      if outcomes[i][1] == 1 then
        outcomes[i] = check(params[i], states[i], now, 0)
      end
    end
  end
  local reply = {now, all and 1 or 0}
  for i = 1, n do
    for j = 1, 6 do
      reply[#reply + 1] = outcomes[i][j]
    end
  end
  return reply
end
