-- region_budget.lua: a ReconciledBudget's window hash on its region's own Redis: admit
-- against the region's budget (hit), or merge the peers' counts and recompute it (merge).
-- Mirrors ratewarden.regions.ReconciledBudget (hit: admit iff own + cost <= cap; merge:
-- GCounter.merge of the entries of one window, max per region, then the cap). Its pure twin
-- is ratewarden.storage._region_budget.run (the same ARGV and reply), which the memory stores
-- (MemoryRegionStore) run under their lock.
-- KEYS[1]     the hash of one (key, global rate) (hit: KEYS[1..n], one per layer of a layered
--             limit, all of one key, so of one hash tag):
--               w           the window number (now // period) the counts belong to
--               c:<region>  that region's admitted count in the window (a G-counter entry)
--               cap         this region's budget for the window; absent until the first
--                           complete sync round, when the default cap (its share) applies
--             A hash of an earlier window is emptied before use, so counts only grow within
--             a window; it lives until one period past its window's end, so that peers
--             still read the final counts (a day at least with an injected now).
-- ARGV[1]     now in microseconds, or "" to read Redis TIME (the region's clock)
-- ARGV[2]     "hit" | "merge"
-- ARGV[3]     period_us of the global rate
-- ARGV[4]     this region's name
-- hit:   ARGV[5] cost, ARGV[6] the default cap; for each further key KEYS[i] (i >= 2),
--        ARGV[2i+3] its period_us and ARGV[2i+4] its default cap
--        Reply {allowed 0|1, then per key: own count after, cap, microseconds until its
--        window ends}; allowed iff own + cost <= cap for every key, and then every key is
--        charged (all or nothing); a denial writes nothing but the roll-over to a new window.
-- merge: ARGV[5] the global limit, ARGV[6] share numerator, ARGV[7] share denominator,
--        ARGV[8] "1" to recompute the cap (a complete, fresh round) or "0",
--        ARGV[9] the number of holds, k; ARGV[10..9+4k] the holds as quadruples (the
--        window of the peer's hash or -1, region, its cap or -1, its default cap): silent
--        peers, each counted as spending its whole budget (its cap in this window, else
--        its default cap) when the cap is recomputed
--        ARGV[10+4k..] the peers' entries as triples (window, region, count)
--        This region's own entries in the peers' hashes (what they last read of it) are
--        merged too: a hash that lost counts (a restart without persistence, FLUSHALL, an
--        eviction, a failover that lost writes) takes them back. When the peers hold more
--        for it than its hash does, the hash lost counts; if the hash has had no merge in
--        this window (no cap, no peer's entry: it was made anew after the loss), everything
--        in it came after the loss and its count becomes own + the peers' most, else the
--        peers' most (the max, as for any entry).
--        Reply {window, merged total, own count, cap or -1 when not recomputed};
--        cap = own + floor(max(0, limit - total - unspent) * numerator / denominator),
--        unspent = the sum over holds of max(0, budget - that peer's merged count)

local now = now_us()
local own_field = 'c:' .. ARGV[4]

-- The window of ``key`` now; a hash of an earlier window is emptied first.
local function roll(key, period)
  local window = math.floor(now / period)
  if tonumber(redis.call('HGET', key, 'w') or '-1') ~= window then
    redis.call('DEL', key)
    redis.call('HSET', key, 'w', fmt(window))
    redis.call('PEXPIRE', key, ttl_ms((window + 2) * period - now))
  end
  return window
end

if ARGV[2] == 'hit' then
  local cost = tonumber(ARGV[5])
  local reply = {1}
  for i = 1, #KEYS do
    local at = 2 * i + 3
    if i == 1 then
      at = 3
    end
    local period = tonumber(ARGV[at])
    local window = roll(KEYS[i], period)
    local own = tonumber(redis.call('HGET', KEYS[i], own_field) or '0')
    local cap = tonumber(redis.call('HGET', KEYS[i], 'cap') or ARGV[at + (i == 1 and 3 or 1)])
    if own + cost > cap then
      reply[1] = 0
    end
    reply[3 * i - 1] = own
    reply[3 * i] = cap
    reply[3 * i + 1] = (window + 1) * period - now
  end
  if reply[1] == 1 and cost > 0 then
    for i = 1, #KEYS do
      reply[3 * i - 1] = redis.call('HINCRBY', KEYS[i], own_field, cost)
    end
  end
  return reply
end
if ARGV[2] ~= 'merge' then
  return redis.error_reply('ERR ratewarden: region_budget has no operation ' .. ARGV[2])
end

local period = tonumber(ARGV[3])
local window = roll(KEYS[1], period)
local first = 10 + 4 * tonumber(ARGV[9])
-- Made anew since its window began (or since a loss): no cap and no peer's entry yet.
local fresh = redis.call('HEXISTS', KEYS[1], 'cap') == 0
if fresh then
  local names = redis.call('HKEYS', KEYS[1])
  for i = 1, #names do
    if string.sub(names[i], 1, 2) == 'c:' and names[i] ~= own_field then
      fresh = false
    end
  end
end
local seen_own = 0
for i = first, #ARGV, 3 do
  if tonumber(ARGV[i]) == window then
    local seen = tonumber(ARGV[i + 2])
    if ARGV[i + 1] == ARGV[4] then
      if seen > seen_own then
        seen_own = seen
      end
    else
      local field = 'c:' .. ARGV[i + 1]
      if seen > tonumber(redis.call('HGET', KEYS[1], field) or '0') then
        redis.call('HSET', KEYS[1], field, fmt(seen))
      end
    end
  end
end
local kept = tonumber(redis.call('HGET', KEYS[1], own_field) or '0')
if seen_own > kept then
  -- Peers only ever read this hash, so they hold more of it only once it lost counts.
  if fresh then
    redis.call('HSET', KEYS[1], own_field, fmt(kept + seen_own))
  else
    redis.call('HSET', KEYS[1], own_field, fmt(seen_own))
  end
end
local total = 0
local flat = redis.call('HGETALL', KEYS[1])
for i = 1, #flat, 2 do
  if string.sub(flat[i], 1, 2) == 'c:' then
    total = total + tonumber(flat[i + 1])
  end
end
local own = tonumber(redis.call('HGET', KEYS[1], own_field) or '0')
local cap = -1
if ARGV[8] == '1' then
  local unspent = 0
  for i = 10, first - 1, 4 do
    if ARGV[i + 1] ~= ARGV[4] then
      local budget = tonumber(ARGV[i + 2])
      if tonumber(ARGV[i]) ~= window or budget < 0 then
        budget = tonumber(ARGV[i + 3])
      end
      local spent = tonumber(redis.call('HGET', KEYS[1], 'c:' .. ARGV[i + 1]) or '0')
      if budget > spent then
        unspent = unspent + budget - spent
      end
    end
  end
  local left = tonumber(ARGV[5]) - total - unspent
  if left < 0 then
    left = 0
  end
  local numerator = tonumber(ARGV[6])
  local denominator = tonumber(ARGV[7])
  cap = own + (left * numerator - (left * numerator) % denominator) / denominator
  redis.call('HSET', KEYS[1], 'cap', fmt(cap))
end
return {window, total, own, cap}
