-- leaky_bucket.lua: the leaky bucket (policer and shaper) over every layer of one decision.
-- Mirrors ratewarden.algorithms.leaky_bucket.check, composed by the prelude's layered().
-- KEYS[i]   "level last_us": level/d requests queued at last_us
-- ARGV[3..] per layer: n, d, capacity (drain n units per microsecond, a request is d units)
-- Reply     see _prelude.lua; delay_us is the admitted request's wait in the queue

local function check(p, state, now, cost)
  local n, d, capacity = p[1], p[2], p[3]
  local room = capacity * d
  local level, last = 0, now
  if state then
    level, last = state[1], state[2]
  end
  -- a clock behind last is held at last: nothing drains twice
  local lag = last - now
  if lag < 0 then
    lag = 0
  end
  local since = now + lag
  local elapsed = since - last
  -- compare with the time to empty before multiplying: elapsed * n stays below level
  if elapsed >= ceil_div(level, n) then
    level = 0
  else
    level = level - elapsed * n
  end
  local free = room - level
  -- pouring in the whole requests that fit leaves free % d; one more fits d - free % d later
  local refill = lag + ceil_div(d - free % d, n)
  if cost > capacity then
    return {0, idiv(free, d), lag + ceil_div(level, n), NEVER, 0, refill}, state, 0
  end
  local need = cost * d
  if need > free then
    local reset = lag + ceil_div(level, n)
    return {0, idiv(free, d), reset, lag + ceil_div(need - free, n), 0, refill}, state, 0
  end
  -- the new request leaves once everything ahead of it has drained
  local delay = lag + ceil_div(level, n)
  level = level + need
  free = room - level
  local reset = lag + ceil_div(level, n)
  refill = lag + ceil_div(d - free % d, n)
  return {1, idiv(free, d), reset, 0, delay, refill}, {level, since}, reset
end

return layered(pair_read, check, pair_write, 3)
