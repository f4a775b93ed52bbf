"""The two Lua scripts of ``ReconciledBudget``, run on the region's own Redis.

Both keep one hash per (key, global rate):

- ``w``: the window number (``now // period``) the counts belong to;
- ``c:<region>``: that region's admitted count in the window (a G-counter entry);
- ``cap``: this region's budget for the window: it may admit while its own
  count stays within ``cap``; absent until the first complete sync round, when
  the region's static share of the limit applies.

A hash left from an earlier window is emptied before use, so counts only grow
within a window. Windows follow the region's clock: Redis ``TIME`` unless the
caller passes ``now`` (tests, simulation).
"""

from __future__ import annotations

__all__ = ["HIT", "MERGE"]

_WINDOW = """
local now = ARGV[1]
-- With an injected now, Redis's real-time TTL may run ahead of it: keep the hash a day
-- at least (the window number in it says what counts; the TTL only collects garbage).
local floor_ms = 0
if now == "" then
  local t = redis.call("TIME")
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
  floor_ms = 86400000
end
local period = tonumber(ARGV[2])
local window = math.floor(now / period)
local stored = tonumber(redis.call("HGET", KEYS[1], "w") or "-1")
if stored ~= window then
  -- A new window: forget the last one; keep the hash one period past its end
  -- so that peers still read the final counts.
  redis.call("DEL", KEYS[1])
  redis.call("HSET", KEYS[1], "w", string.format("%d", window))
  redis.call("PEXPIRE", KEYS[1], math.max(floor_ms, math.ceil(((window + 2) * period - now) / 1000)))
end
"""

#: KEYS[1] the hash. ARGV: now_us or "", period_us, region, cost, default cap.
#: Reply: {allowed 0|1, own count after, cap, microseconds until the window ends}.
#: Mirrors ``ReconciledBudget.hit``: admit iff own + cost <= cap; a denial writes
#: nothing but the roll-over to a new window.
HIT = (
    _WINDOW
    + """
local own_field = "c:" .. ARGV[3]
local cost = tonumber(ARGV[4])
local own = tonumber(redis.call("HGET", KEYS[1], own_field) or "0")
local cap = tonumber(redis.call("HGET", KEYS[1], "cap") or ARGV[5])
local reset = (window + 1) * period - now
if own + cost <= cap then
  if cost > 0 then
    own = redis.call("HINCRBY", KEYS[1], own_field, cost)
  end
  return {1, own, cap, reset}
end
return {0, own, cap, reset}
"""
)

#: KEYS[1] the hash. ARGV: now_us or "", period_us, region, limit, share numerator,
#: share denominator, recompute 0|1, then triples (window, region, count) from peers.
#: Reply: {window, merged total, own count, cap or -1 when not recomputed}.
#: Mirrors ``GCounter.merge`` (entries of the same window, max per region) and then,
#: on a complete round, cap = own + floor((limit - total)+ * numerator / denominator).
MERGE = (
    _WINDOW
    + """
local own_field = "c:" .. ARGV[3]
for i = 8, #ARGV, 3 do
  if tonumber(ARGV[i]) == window and ARGV[i + 1] ~= ARGV[3] then
    local field = "c:" .. ARGV[i + 1]
    local seen = tonumber(ARGV[i + 2])
    if seen > tonumber(redis.call("HGET", KEYS[1], field) or "0") then
      redis.call("HSET", KEYS[1], field, string.format("%d", seen))
    end
  end
end
local total = 0
local flat = redis.call("HGETALL", KEYS[1])
for i = 1, #flat, 2 do
  if string.sub(flat[i], 1, 2) == "c:" then
    total = total + tonumber(flat[i + 1])
  end
end
local own = tonumber(redis.call("HGET", KEYS[1], own_field) or "0")
local cap = -1
if ARGV[7] == "1" then
  local left = tonumber(ARGV[4]) - total
  if left < 0 then left = 0 end
  local numerator = tonumber(ARGV[5])
  local denominator = tonumber(ARGV[6])
  cap = own + (left * numerator - (left * numerator) % denominator) / denominator
  redis.call("HSET", KEYS[1], "cap", string.format("%d", cap))
end
return {window, total, own, cap}
"""
)
