-- fixed_window.lua: a counter per epoch-aligned window, every layer all or nothing.
-- Mirrors ratewarden.algorithms.fixed_window.check, and the prelude's layered() around it:
-- the same arguments, the same all-or-nothing rule and the same reply, word for word.
-- KEYS[i]   "window_index count": count admitted in window floor(now / period)
-- ARGV[3..] per layer: limit, period_us
-- Reply     see _prelude.lua
--
-- It is written out rather than composed by layered(): the Envoy service's rules are fixed
-- windows, and every Redis call it makes runs this script. Without a table per layer for its
-- params, its state, its outcome and its new state, or a closure call per step, redis-server
-- spends about an eighth less CPU on a call of three descriptors (docs/performance-serve.md).
--
-- On Redis TIME, the window's first hit sets the key to expire at the window's end (PXAT, in
-- Redis's milliseconds: a PX counted from the write would outlive the window by 1 ms when a
-- millisecond ticks over between TIME and SET), and a key that already holds this window's
-- count is rewritten with KEEPTTL. Redis then neither drops nor re-adds the key's expiry:
-- redis-server's CPU on a call of three descriptors falls by about an eighth
-- (docs/performance-serve.md). With an injected clock every write sets its TTL afresh, as the
-- prelude's floor of a day counts from the last write (the injected clock may run slower than
-- Redis's, and one of its windows outlast a day of Redis's time).

local now = now_us()
local n = #KEYS
local limits, periods, costs = {}, {}, {}
local bad = layer_args(2, function(i, at, cost)
  limits[i], periods[i], costs[i] = tonumber(ARGV[at]), tonumber(ARGV[at + 1]), cost
end)
if bad then
  return bad
end

-- Check every layer: the count in the current window (0 for a state from another window)
local windows, counts, keep = {}, {}, {}
local on_redis_time = ARGV[1] == ''
local all = 1
for i = 1, n do
  local window = idiv(now, periods[i])
  local count = 0
  local raw = redis.call('GET', KEYS[i])
  if raw then
    local sep = string.find(raw, ' ', 1, true)
    if sep and tonumber(string.sub(raw, 1, sep - 1)) == window then
      count = tonumber(string.sub(raw, sep + 1))
      keep[i] = on_redis_time -- this window's TTL is already set: rewrite with KEEPTTL
    end
  end
  windows[i], counts[i] = window, count
  if count + costs[i] > limits[i] then
    all = 0
  end
end

-- Commit all or nothing. A layer that allows while another denies answers as checked with
-- cost 0: the state it keeps.
local reply = {now, all}
local at = 2
for i = 1, n do
  local limit, period, cost, count = limits[i], periods[i], costs[i], counts[i]
  local to_end = period - (now - windows[i] * period)
  local allowed, remaining, reset, retry = 1, limit - count, 0, 0
  if all == 1 then
    local total = count + cost
    remaining = limit - total
    if total > 0 then
      reset = to_end
    end
    if cost > 0 then
      local value = string.format('%.0f %.0f', windows[i], total)
      if keep[i] then
        redis.call('SET', KEYS[i], value, 'KEEPTTL')
      elseif on_redis_time then
        redis.call('SET', KEYS[i], value, 'PXAT', ceil_div(now + to_end, 1000))
      else
        redis.call('SET', KEYS[i], value, 'PX', ttl_ms(reset))
      end
    end
  else
    if count > 0 then
      reset = to_end
    end
    if count + cost > limit then
      allowed, retry = 0, to_end
      if cost > limit then
        retry = NEVER
      end
    end
    -- a count admitted under a higher limit (the key holds none) may pass this one
    if remaining < 0 then
      remaining = 0
    end
  end
  reply[at + 1], reply[at + 2], reply[at + 3] = allowed, remaining, reset
  reply[at + 4], reply[at + 5], reply[at + 6] = retry, 0, to_end
  at = at + 6
end
return reply
