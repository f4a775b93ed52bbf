-- token_bucket.lua: the token bucket over every layer of one decision, all or nothing.
-- Mirrors ratewarden.algorithms.token_bucket.check, composed by the prelude's layered();
-- the bucket itself is the prelude's bucket_step, over the tokens missing.
-- KEYS[i]   "level last_us": level/d tokens held at last_us
-- ARGV[3..] per layer: n, d, capacity (refill n units per microsecond, a token is d units)
-- Reply     see _prelude.lua

local function check(p, state, now, cost)
  local room = p[3] * p[2]
  local missing, last = 0, now
  if state then
    missing, last = room - state[1], state[2]
  end
  local outcome, used, since, ttl = bucket_step(p, missing, last, now, cost, false)
  if outcome[1] == 0 then
    return outcome, state, 0
  end
  return outcome, {room - used, since}, ttl
end

return layered(state_read, check, state_write, 3)
