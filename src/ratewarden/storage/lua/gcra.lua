-- gcra.lua: GCRA over every layer of one decision, all or nothing.
-- Mirrors ratewarden.algorithms.gcra.check, composed by the prelude's layered().
-- KEYS[i]   "tat_us frac": the theoretical arrival time tat_us + frac/n
-- ARGV[3..] per layer: n, d, capacity (emission interval d/n microseconds)
-- Reply     see _prelude.lua

local function read(key)
  local raw = redis.call('GET', key)
  if not raw then
    return nil
  end
  local sep = string.find(raw, ' ', 1, true)
  return {tonumber(string.sub(raw, 1, sep - 1)), tonumber(string.sub(raw, sep + 1))}
end

local function write(key, state, ttl_us)
  redis.call('SET', key, fmt(state[1]) .. ' ' .. fmt(state[2]), 'PX', ttl_ms(ttl_us))
end

local function check(p, state, now, cost)
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
  if cost > capacity then
    return {0, idiv(left, d), ceil_div(ahead, n), NEVER, 0}, state, 0
  end
  local after = ahead + cost * d
  if after > room then
    return {0, idiv(left, d), ceil_div(ahead, n), ceil_div(after - room, n), 0}, state, 0
  end
  local total = frac + cost * d
  local reset = ceil_div(after, n)
  return {1, idiv(room - after, d), reset, 0, 0}, {tat + idiv(total, n), total % n}, reset
end

return layered(read, check, write, 3)
