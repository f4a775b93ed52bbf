-- fixed_window.lua: a counter per epoch-aligned window, every layer all or nothing.
-- Mirrors ratewarden.algorithms.fixed_window.check, composed by the prelude's layered().
-- KEYS[i]   "window_index count": count admitted in window floor(now / period)
-- ARGV[3..] per layer: limit, period_us
-- Reply     see _prelude.lua

local function check(p, state, now, cost)
  local limit, period = p[1], p[2]
  local window = idiv(now, period)
  local count = 0
  if state and state[1] == window then
    count = state[2]
  end
  local to_end = period - (now - window * period)
  if count + cost > limit then
    local retry = to_end
    if cost > limit then
      retry = NEVER
    end
    local reset = 0
    if count > 0 then
      reset = to_end
    end
    return {0, limit - count, reset, retry, 0, to_end}, state, 0
  end
  local total = count + cost
  local reset = 0
  if total > 0 then
    reset = to_end
  end
  -- the effective window is the window's end: the next one starts from 0
  return {1, limit - total, reset, 0, 0, to_end}, {window, total}, reset
end

return layered(state_read, check, state_write, 2)
