-- sliding_window.lua: two-counter estimate per epoch-aligned window, every layer all or nothing.
-- Mirrors ratewarden.algorithms.sliding_window.check, composed by the prelude's layered().
-- KEYS[i]   "window_index prev_count cur_count"
-- ARGV[3..] per layer: limit, period_us
-- Reply     see _prelude.lua
--
-- The products below can pass 2^53 (10^6/day); they are computed in the same
-- order as the Python reference, whose float() arithmetic rounds identically.

local function counts(state, window)
  if not state then
    return 0, 0
  end
  if state[1] == window then
    return state[2], state[3]
  end
  if state[1] == window - 1 then
    return state[3], 0
  end
  return 0, 0
end

local function retry_after(limit, period, elapsed, prev, cur, cost)
  local wait
  if cur + cost <= limit then
    local allowance = math.floor((limit - cur - cost) * period / prev)
    wait = period - allowance - elapsed
  else
    local allowance = math.floor((limit - cost) * period / cur)
    wait = period - elapsed + period - allowance
  end
  if wait < 1 then
    wait = 1
  end
  return wait
end

-- mirrors sliding_window._refill_after: one more unit once used are counted in this window
local function refill_after(limit, period, elapsed, prev, used)
  if used < limit and prev == 0 then
    return 1
  end
  return retry_after(limit, period, elapsed, prev, used, 1)
end

local function check(p, state, now, cost)
  local limit, period = p[1], p[2]
  local window = idiv(now, period)
  local elapsed = now - window * period
  local prev, cur = counts(state, window)
  local weighted = prev * (period - elapsed)
  local room = limit * period
  local allowed = cost <= limit and weighted + (cur + cost) * period <= room
  local total = cur
  if allowed then
    total = cur + cost
  end
  -- at least 0, as the Python reference: a clock stepped back weighs prev more than it did
  local remaining = math.floor((room - (weighted + total * period)) / period)
  if remaining < 0 then
    remaining = 0
  end
  local reset = 0
  if total > 0 then
    reset = 2 * period - elapsed
  elseif prev > 0 then
    reset = period - elapsed
  end
  local used = total + remaining
  local refill = refill_after(limit, period, elapsed, prev, used)
  if allowed then
    return {1, remaining, reset, 0, 0, refill}, {window, prev, total}, reset
  end
  local retry = NEVER
  if cost <= limit then
    retry = retry_after(limit, period, elapsed, prev, cur, cost)
  end
  return {0, remaining, reset, retry, 0, refill}, state, 0
end

return layered(state_read, check, state_write, 2)
