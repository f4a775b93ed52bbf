-- fair_share.lua: weighted fair shares of a pooled GCRA budget, work-conserving over idle tenants;
-- a hit, or a reservation that gcra_multi.lua's settle refunds.
-- Mirrors ratewarden.algorithms._fair_share.run (same ARGV, same reply).
-- KEYS[1]   the pool's "tat_us frac since_us used [refunds]" (the hard cap; gcra_multi.lua's
--           axis state, its refunds kept)
-- KEYS[2]   the tenant's, alike (same rate, charged cost * W / weight)
-- KEYS[3]   hash: tenant -> "last_seen_us weight" (the active tenants)
-- KEYS[4]   the reservation record (a reserve; absent for a hit), in gcra_multi.lua's form
--           with each axis priced: "r expires_us cost s u 1 1 charged s u W weight"
-- ARGV[1]   now in microseconds, or "" to read Redis TIME
-- ARGV[2]   cost (a reserve's estimate)
-- ARGV[3..5] n, d, capacity of the pool rate
-- ARGV[6]   tenant   ARGV[7] its weight   ARGV[8] activity window in microseconds
-- ARGV[9]   the record's ttl_us (a reserve)
-- Reply     {now, allowed, active_weight, charged, pool: 6 numbers, tenant: 6 numbers}
--           (each GCRA outcome as _prelude.lua lists it); a reserve adds its status:
--           0 denied, 1 charged, 2 already reserved under this id (nothing charged; an open
--           record: under a settled one's id a reserve is charged afresh)

local now = now_us()
local cost = tonumber(ARGV[2])
local params = {tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])}
local tenant, weight, window = ARGV[6], tonumber(ARGV[7]), tonumber(ARGV[8])
local record_key = KEYS[4]

local read, write, check = state_read, state_write, gcra_check -- the prelude's GCRA

local total = weight
local raw = redis.call('HGETALL', KEYS[3])
for i = 1, #raw, 2 do
  if raw[i] ~= tenant then
    local value = raw[i + 1]
    local sep = string.find(value, ' ', 1, true)
    if tonumber(string.sub(value, 1, sep - 1)) > now - window then
      total = total + tonumber(string.sub(value, sep + 1))
    else
      redis.call('HDEL', KEYS[3], raw[i])
    end
  end
end
redis.call('HSET', KEYS[3], tenant, fmt(now) .. ' ' .. fmt(weight))
redis.call('PEXPIRE', KEYS[3], ttl_ms(window))

-- An open record still alive on the script's clock: a retried reserve charges nothing
-- again. A settled one ("s ...") is over: a reserve under its id is charged afresh.
local replayed = false
if record_key then
  local found = redis.call('GET', record_key)
  replayed = found and string.sub(found, 1, 2) == 'r '
    and tonumber(string.match(found, '^%S+ (%S+)')) > now or false
end

-- gcra_multi.lua's busy period (when the state left rest) and the units charged in it,
-- kept with each state so that its settle bounds a refund by what was charged after.
local function rested(state)
  return not state or state[1] < now or (state[1] == now and state[2] == 0)
end
local function busy(state, amount)
  if rested(state) or not state[3] then
    return now, amount
  end
  return state[3], (state[4] or 0) + amount
end
-- A state to write: the GCRA step's, its busy period, and the refunds the old state keeps
-- in it (gcra_multi.lua's position, units pairs; none at rest).
local function with_busy(new, state, since, used)
  local value = {new[1], new[2], since, used}
  if not rested(state) then
    for i = 5, #state - 1, 2 do
      value[#value + 1] = state[i]
      value[#value + 1] = state[i + 1]
    end
  end
  return value
end

local charged = ceil_div(cost * total, weight)
local asked = replayed and 0 or 1
local pool_state, mine_state = read(KEYS[1]), read(KEYS[2])
local pool, pool_new, pool_ttl = check(params, pool_state, now, cost * asked)
local mine, mine_new, mine_ttl = check(params, mine_state, now, charged * asked)
local allowed = pool[1] == 1 and mine[1] == 1
if allowed and not replayed then
  local pool_since, pool_used = busy(pool_state, cost)
  local mine_since, mine_used = busy(mine_state, charged)
  if cost > 0 then
    write(KEYS[1], with_busy(pool_new, pool_state, pool_since, pool_used), pool_ttl)
    write(KEYS[2], with_busy(mine_new, mine_state, mine_since, mine_used), mine_ttl)
  end
  if record_key then
    local ttl = tonumber(ARGV[9])
    local words = {'r', now + ttl, cost, pool_since, pool_used, 1, 1,
      charged, mine_since, mine_used, total, weight}
    for j = 2, #words do
      words[j] = fmt(words[j])
    end
    redis.call('SET', record_key, table.concat(words, ' '), 'PX', ttl_ms(ttl))
  end
end
if not allowed and pool[1] == 1 then
  pool = check(params, pool_state, now, 0)
end
if not allowed and mine[1] == 1 then
  mine = check(params, mine_state, now, 0)
end
local reply = {now, allowed and 1 or 0, total, charged}
for j = 1, 6 do
  reply[#reply + 1] = pool[j]
end
for j = 1, 6 do
  reply[#reply + 1] = mine[j]
end
if record_key then
  reply[#reply + 1] = replayed and 2 or (allowed and 1 or 0)
end
return reply
