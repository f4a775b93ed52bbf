-- fair_share.lua: weighted fair shares of a pooled GCRA budget, work-conserving over idle tenants.
-- Mirrors ratewarden.algorithms._fair_share.run (same ARGV, same reply).
-- KEYS[1]   the pool's "tat_us frac" (the hard cap)
-- KEYS[2]   the tenant's "tat_us frac" (same rate, charged cost * W / weight)
-- KEYS[3]   hash: tenant -> "last_seen_us weight" (the active tenants)
-- ARGV[1]   now in microseconds, or "" to read Redis TIME
-- ARGV[2]   cost
-- ARGV[3..5] n, d, capacity of the pool rate
-- ARGV[6]   tenant   ARGV[7] its weight   ARGV[8] activity window in microseconds
-- Reply     {now, allowed, active_weight, charged, pool: 6 numbers, tenant: 6 numbers}
--           (each GCRA outcome as _prelude.lua lists it)

local now = now_us()
local cost = tonumber(ARGV[2])
local params = {tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])}
local tenant, weight, window = ARGV[6], tonumber(ARGV[7]), tonumber(ARGV[8])

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

local charged = ceil_div(cost * total, weight)
local pool_state, mine_state = read(KEYS[1]), read(KEYS[2])
local pool, pool_new, pool_ttl = check(params, pool_state, now, cost)
local mine, mine_new, mine_ttl = check(params, mine_state, now, charged)
local allowed = pool[1] == 1 and mine[1] == 1
if allowed and cost > 0 then
  write(KEYS[1], pool_new, pool_ttl)
  write(KEYS[2], mine_new, mine_ttl)
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
return reply
