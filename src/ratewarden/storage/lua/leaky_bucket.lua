-- leaky_bucket.lua: the leaky bucket (policer and shaper) over every layer of one decision.
-- Mirrors ratewarden.algorithms.leaky_bucket.check, composed by the prelude's layered();
-- the bucket itself is the prelude's bucket_step.
-- KEYS[i]   "level last_us": level/d requests queued at last_us
-- ARGV[3..] per layer: n, d, capacity (drain n units per microsecond, a request is d units)
-- Reply     see _prelude.lua; delay_us is the admitted request's wait in the queue

local function check(p, state, now, cost)
  local level, last = 0, now
  if state then
    level, last = state[1], state[2]
  end
  local outcome, used, since, ttl = bucket_step(p, level, last, now, cost, true)
  if outcome[1] == 0 then
    return outcome, state, 0
  end
  return outcome, {used, since}, ttl
end

return layered(state_read, check, state_write, 3)
