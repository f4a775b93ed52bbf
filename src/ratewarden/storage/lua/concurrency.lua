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

local function keep(list)
  local latest = now
  for _, lease in ipairs(list) do
    if lease[3] > latest then
      latest = lease[3]
    end
  end
  if latest > now then
    redis.call('PEXPIRE', key, ttl_ms(latest - now))
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
    local kept = {}
    for _, lease in ipairs(leases) do
      if lease[1] ~= lease_id then
        kept[#kept + 1] = lease
      end
    end
    keep(kept)
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
-- (sorts held in place).
local function lapsed(held, needed)
  table.sort(held, function(a, b) return a[2] < b[2] end)
  local wait = 0
  for _, pair in ipairs(held) do
    needed = needed - pair[1]
    wait = pair[2] - now
    if needed <= 0 then
      break
    end
  end
  return wait
end

-- The effective window of the leases list: take the remaining slots now, then one more.
local function refill_after(list, in_use, remaining)
  local held = {}
  for _, lease in ipairs(list) do
    held[#held + 1] = {lease[2], lease[3]}
  end
  if remaining > 0 then
    held[#held + 1] = {remaining, now + ttl}
  end
  return lapsed(held, in_use + remaining + 1 - limit)
end

local others_in_use, in_use, latest = 0, 0, now
for _, lease in ipairs(leases) do
  in_use = in_use + lease[2]
  if lease[1] ~= lease_id then
    others_in_use = others_in_use + lease[2]
  end
end

if slots > limit or others_in_use + slots > limit then
  local retry = NEVER
  if slots <= limit then
    table.sort(leases, function(a, b) return a[3] < b[3] end)
    local needed = in_use + slots - limit
    retry = 0
    for _, lease in ipairs(leases) do
      needed = needed - lease[2]
      retry = lease[3] - now
      if needed <= 0 then
        break
      end
    end
  end
  for _, lease in ipairs(leases) do
    if lease[3] > latest then
      latest = lease[3]
    end
  end
  local remaining = limit - in_use
  if remaining < 0 then
    remaining = 0
  end
  return {now, 0, remaining, latest - now, retry, refill_after(leases, in_use, remaining)}
end

local expires = now + ttl
redis.call('HSET', key, lease_id, fmt(expires) .. ' ' .. fmt(slots))
local kept = {}
for _, lease in ipairs(leases) do
  if lease[1] ~= lease_id then
    kept[#kept + 1] = lease
  end
end
kept[#kept + 1] = {lease_id, slots, expires}
keep(kept)
for _, lease in ipairs(kept) do
  if lease[3] > latest then
    latest = lease[3]
  end
end
local remaining = limit - (others_in_use + slots)
return {now, 1, remaining, latest - now, 0, refill_after(kept, others_in_use + slots, remaining)}
