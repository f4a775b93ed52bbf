-- sliding_log.lua: an exact log of admitted requests, every layer all or nothing.
-- Mirrors ratewarden.algorithms.sliding_log.check, composed by the prelude's layered().
-- KEYS[i]   a list of "timestamp_us:cost", oldest first (the Python tuple, entry for entry)
-- ARGV[3..] per layer: limit, period_us
-- Reply     see _prelude.lua
--
-- A commit drops the expired prefix (LTRIM), appends the new entry (RPUSH) and
-- sets the TTL to when that entry ages out (PEXPIRE).

local function read(key)
  local entries = {}
  for i, raw in ipairs(redis.call('LRANGE', key, 0, -1)) do
    local sep = string.find(raw, ':', 1, true)
    entries[i] = {tonumber(string.sub(raw, 1, sep - 1)), tonumber(string.sub(raw, sep + 1))}
  end
  return entries
end

-- new = {expired prefix length, timestamp, cost} of one admission
local function write(key, new, ttl_us)
  if new[1] > 0 then
    redis.call('LTRIM', key, new[1], -1)
  end
  redis.call('RPUSH', key, fmt(new[2]) .. ':' .. fmt(new[3]))
  redis.call('PEXPIRE', key, ttl_ms(ttl_us))
end

local function retry_after(entries, start, limit, period, now, used, cost)
  for i = start + 1, #entries do
    used = used - entries[i][2]
    if used + cost <= limit then
      return entries[i][1] + period - now
    end
  end
  return NEVER
end

local function check(p, entries, now, cost)
  local limit, period = p[1], p[2]
  local horizon = now - period
  local start = 0
  while start < #entries and entries[start + 1][1] <= horizon do
    start = start + 1
  end
  local used = 0
  for i = start + 1, #entries do
    used = used + entries[i][2]
  end
  local newest
  if #entries > start then
    newest = entries[#entries][1]
  end
  local allowed = used + cost <= limit
  local new
  if allowed and cost > 0 then
    local stamp = now
    if newest and newest > stamp then
      stamp = newest
    end
    new = {start, stamp, cost}
    newest = stamp
    used = used + cost
  end
  local reset = 0
  if newest then
    reset = newest + period - now
  end
  -- the oldest live entry ages out first; with none, the units used now are the oldest
  local refill = period
  if #entries > start then
    refill = entries[start + 1][1] + period - now
  elseif new then
    refill = new[2] + period - now
  end
  if used > limit then
    -- entries admitted under a higher limit (the key holds none): more than the oldest
    -- must age out before one unit fits, and nothing remains
    refill = retry_after(entries, start, limit, period, now, used, 1)
  end
  if allowed then
    return {1, limit - used, reset, 0, 0, refill}, new, reset
  end
  local retry = retry_after(entries, start, limit, period, now, used, cost)
  local remaining = limit - used
  if remaining < 0 then
    remaining = 0
  end
  return {0, remaining, reset, retry, 0, refill}, entries, 0
end

return layered(read, check, write, 2)
