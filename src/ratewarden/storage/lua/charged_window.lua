-- charged_window.lua: --charge-denied's fixed window, which counts every hit charged to it,
-- a denied call's too (envoyproxy/ratelimit's INCRBY). Mirrors
-- ratewarden.algorithms.charged_window.run (same ARGV, same reply, same writes).
-- KEYS[i]   "window_index count": every hit charged in window floor(now / period_i), denied
--           ones included (so the count may pass the limit); one key per rate of the call
-- ARGV[1]   now in whole microseconds, or "" to read Redis TIME
-- ARGV[2]   cost (a whole number >= 0; 0 checks without counting)
-- ARGV[3..] per rate: limit, period_us
-- Reply     as a rate script's (see _prelude.lua): {now_us, allowed, per rate: allowed,
--           remaining, reset_after_us, retry_after_us, delay_us, refill_after_us}
--
-- Every rate counts the cost, whatever the others decide: a rate is over when its count,
-- this call's cost included, passes its limit, and the call is allowed when none is. Unlike
-- fixed_window.lua (a denied call writes nothing) a rate over its limit stays over until its
-- window ends, a check (cost 0) included: that is what upstream's "check on the request,
-- charge when the stream is done" pattern relies on.

local now = now_us()
local cost = tonumber(ARGV[2])
local n = #KEYS
if #ARGV ~= 2 + 2 * n then
  return redis.error_reply('ERR ratewarden: ' .. (#ARGV - 2) .. ' rate arguments for ' .. n .. ' KEYS')
end

local reply = {now, 1}
for i = 1, n do
  local limit, period = tonumber(ARGV[1 + 2 * i]), tonumber(ARGV[2 + 2 * i])
  local window = idiv(now, period)
  local count = 0
  local state = state_read(KEYS[i])
  if state and state[1] == window then
    count = state[2]
  end
  local to_end = period - (now - window * period)
  local total = count + cost
  if cost > 0 then
    state_write(KEYS[i], {window, total}, to_end)
  end
  local allowed, remaining, retry = 1, limit - total, 0
  if total > limit then
    allowed, remaining, retry = 0, 0, to_end
    if cost > limit then
      retry = NEVER
    end
    reply[2] = 0
  end
  local reset = 0
  if total > 0 then
    reset = to_end
  end
  local at = 2 + (i - 1) * 6
  reply[at + 1], reply[at + 2], reply[at + 3] = allowed, remaining, reset
  reply[at + 4], reply[at + 5], reply[at + 6] = retry, 0, to_end
end
return reply
