-- token_bucket.lua: the token bucket over every layer of one decision, all or nothing.
-- Mirrors ratewarden.algorithms.token_bucket.check, composed by the prelude's layered().
-- KEYS[i]   "level last_us": level/d tokens held at last_us
-- ARGV[3..] per layer: n, d, capacity (refill n units per microsecond, a token is d units)
-- Reply     see _prelude.lua

local function check(p, state, now, cost)
  local n, d, capacity = p[1], p[2], p[3]
  local room = capacity * d
  local level, last = room, now
  if state then
    level, last = state[1], state[2]
  end
  -- a clock behind last is held at last: nothing refills twice
  local lag = last - now
  if lag < 0 then
    lag = 0
  end
  local since = now + lag
  local elapsed = since - last
  -- compare with the time to fill before multiplying: elapsed * n stays below room
  if elapsed >= ceil_div(room - level, n) then
    level = room
  else
    level = level + elapsed * n
  end
  -- spending the whole tokens leaves level % d; one token is there d - level % d later
  local refill = lag + ceil_div(d - level % d, n)
  if cost > capacity then
    return {0, idiv(level, d), lag + ceil_div(room - level, n), NEVER, 0, refill}, state, 0
  end
  local need = cost * d
  if level < need then
    local reset = lag + ceil_div(room - level, n)
    return {0, idiv(level, d), reset, lag + ceil_div(need - level, n), 0, refill}, state, 0
  end
  level = level - need
  local reset = lag + ceil_div(room - level, n)
  refill = lag + ceil_div(d - level % d, n)
  return {1, idiv(level, d), reset, 0, 0, refill}, {level, since}, reset
end

return layered(pair_read, check, pair_write, 3)
