-- concurrency.lua: in-flight slots held by leases with a TTL.
-- Mirrors ratewarden.algorithms.concurrency (acquire, release, renew).
-- KEYS[1]   hash: lease_id -> "expires_us slots"
-- ARGV[1]   now in microseconds, or "" to read Redis TIME
-- ARGV[2]   op: "acquire" | "release" | "renew"
-- ARGV[3]   lease id
-- ARGV[4]   limit (acquire)
-- ARGV[5]   slots (acquire)
-- ARGV[6]   ttl_us (acquire, renew)
-- Reply     acquire: {now_us, allowed, remaining, reset_after_us, retry_after_us, refill_after_us}
--           release, renew: {now_us, 1 if the lease was held else 0}
-- refill_after_us: were the remaining slots taken now (under leases of this TTL), when a
-- slot would free if no holder released early (see ratewarden.algorithms.concurrency).

local now = now_us()
local op, lease_id = ARGV[2], ARGV[3]
local key = KEYS[1]

-- Active leases; expired ones are dropped from the hash as they are found.
local leases = {}
local raw = redis.call('HGETALL', key)
for i = 1, #raw, 2 do
  local value = raw[i + 1]
  local sep = string.find(value, ' ', 1, true)
  local expires = tonumber(string.sub(value, 1, sep - 1))
  if expires > now then
    leases[#leases + 1] = {raw[i], tonumber(string.sub(value, sep + 1)), expires}
  else
    redis.call('HDEL', key, raw[i])
  end
end

-- The latest expiry of the leases in list, or now when there are none.
local function latest(list)
  local found = now
  for _, lease in ipairs(list) do
    if lease[3] > found then
      found = lease[3]
    end
  end
  return found
end

-- The leases in list but lease_id's.
local function others(list)
  local kept = {}
  for _, lease in ipairs(list) do
    if lease[1] ~= lease_id then
      kept[#kept + 1] = lease
    end
  end
  return kept
end

-- The key lives as long as its latest lease, and goes with the last one.
local function keep(list)
  local until_us = latest(list)
  if until_us > now then
    redis.call('PEXPIRE', key, ttl_ms(until_us - now))
  else
    redis.call('DEL', key)
  end
end

local held = false
for _, lease in ipairs(leases) do
  if lease[1] == lease_id then
    held = true
  end
end

if op == 'release' then
  if held then
    redis.call('HDEL', key, lease_id)
    keep(others(leases))
  end
  return {now, held and 1 or 0}
end

local ttl = tonumber(ARGV[6])
if op == 'renew' then
  if held then
    for _, lease in ipairs(leases) do
      if lease[1] == lease_id then
        lease[3] = now + ttl
        redis.call('HSET', key, lease_id, fmt(lease[3]) .. ' ' .. fmt(lease[2]))
      end
    end
    keep(leases)
  end
  return {now, held and 1 or 0}
end

-- acquire
local limit, slots = tonumber(ARGV[4]), tonumber(ARGV[5])

-- Microseconds until needed slots of the {slots, expires} pairs have lapsed, soonest first
-- (sorts holding in place).
local function lapsed(holding, needed)
  table.sort(holding, function(a, b) return a[2] < b[2] end)
  local wait = 0
  for _, pair in ipairs(holding) do
    needed = needed - pair[1]
    wait = pair[2] - now
    if needed <= 0 then
      break
    end
  end
  return wait
end

-- The reply of an acquire, allowed or not, over the leases in list (those kept, or those
-- found when denied): the twin of _outcome in ratewarden.algorithms.concurrency.
local function reply(allowed, list)
  local in_use, holding = 0, {}
  for _, lease in ipairs(list) do
    in_use = in_use + lease[2]
    holding[#holding + 1] = {lease[2], lease[3]}
  end
  local retry = 0
  if not allowed then
    retry = NEVER
    if slots <= limit then
      -- the longest this request must wait if no holder releases early: until enough of
      -- the other leases, soonest-expiring first, have lapsed (its own lease's slots are
      -- replaced by the ones it asks for, not added to them)
      local others_in_use, others_holding = 0, {}
      for _, lease in ipairs(list) do
        if lease[1] ~= lease_id then
          others_in_use = others_in_use + lease[2]
          others_holding[#others_holding + 1] = {lease[2], lease[3]}
        end
      end
      retry = lapsed(others_holding, others_in_use + slots - limit)
    end
  end
  local remaining = limit - in_use
  if remaining < 0 then
    remaining = 0
  end
  if remaining > 0 then
    holding[#holding + 1] = {remaining, now + ttl}
  end
  -- with in_use + remaining slots held (at least the limit), one more needs this many back
  local refill = lapsed(holding, in_use + remaining + 1 - limit)
  return {now, allowed and 1 or 0, remaining, latest(list) - now, retry, refill}
end

local kept = others(leases)
local others_in_use = 0
for _, lease in ipairs(kept) do
  others_in_use = others_in_use + lease[2]
end
if slots > limit or others_in_use + slots > limit then
  return reply(false, leases)
end

local expires = now + ttl
redis.call('HSET', key, lease_id, fmt(expires) .. ' ' .. fmt(slots))
kept[#kept + 1] = {lease_id, slots, expires}
keep(kept)
return reply(true, kept)
