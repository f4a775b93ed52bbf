-- gcra_multi.lua: GCRA on several axes of one key, a cost per axis, all or nothing;
-- and the refund of a reservation (settle), once per reservation id.
-- Mirrors ratewarden.algorithms._gcra_multi.run (same ARGV, same reply).
-- KEYS[1..m]  "tat_us frac since_us" per axis (all with the budget key's hash tag); since_us
--             is when the axis last left rest (see _gcra_multi.py: why refunds need it)
-- KEYS[m+1]   the reservation record (optional for reserve): "r expires_us c1 s1 c2 s2 ..."
--             while reserved (cost and busy period per axis), "s expires_us" once settled.
--             Its expiry is kept in the value too, so that a test clock (ARGV[1]) sees it
--             expire; PX removes it on Redis time.
-- ARGV[1]     now in microseconds, or "" to read Redis TIME
-- ARGV[2]     "reserve" | "settle" | "charge" (usage that already happened, no record)
-- ARGV[3]     m, the number of axes
-- ARGV[4]     record ttl_us (reserve)
-- ARGV[5..]   per axis: n, d, capacity, amount (reserve: cost; settle: actual usage)
-- Reply       reserve: {now, allowed, status, per axis 5 numbers (see _prelude.lua)}
--               status 0 denied, 1 charged, 2 already reserved under this id
--             settle: {now, status, per axis refunded units, per axis 5 numbers}
--               status 0 no such reservation, 1 settled, 2 already settled
--             charge: {now, 1, per axis units charged, per axis 5 numbers}

local now = now_us()
local op = ARGV[2]
local m = tonumber(ARGV[3])

local function read(key)
  local raw = redis.call('GET', key)
  if not raw then
    return nil
  end
  local state = {}
  for word in string.gmatch(raw, '%S+') do
    state[#state + 1] = tonumber(word)
  end
  return state
end

local function write(key, state, since, ttl_us)
  if state then
    local value = fmt(state[1]) .. ' ' .. fmt(state[2]) .. ' ' .. fmt(since)
    redis.call('SET', key, value, 'PX', ttl_ms(ttl_us))
  else
    redis.call('DEL', key)
  end
end

-- When the axis left rest: kept while busy, now when a charge starts from rest.
local function busy_since(state)
  if not state or state[1] < now or (state[1] == now and state[2] == 0) then
    return now
  end
  return state[3]
end

local check = gcra_check -- the prelude's GCRA step

local params, amounts, states = {}, {}, {}
for i = 1, m do
  local base = 4 + (i - 1) * 4
  params[i] = {tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3])}
  amounts[i] = tonumber(ARGV[base + 4])
  states[i] = read(KEYS[i])
end
local record_key = KEYS[m + 1]

-- The record's words, or nil when absent or expired (on the script's clock).
local function record()
  if not record_key then
    return nil
  end
  local raw = redis.call('GET', record_key)
  if not raw then
    return nil
  end
  local words = {}
  for word in string.gmatch(raw, '%S+') do
    words[#words + 1] = word
  end
  if tonumber(words[2]) <= now then
    return nil
  end
  return words
end

local function append(reply, outcome)
  for j = 1, 5 do
    reply[#reply + 1] = outcome[j]
  end
end

if op == 'reserve' then
  if record() then
    local reply = {now, 1, 2}
    for i = 1, m do
      append(reply, (check(params[i], states[i], now, 0)))
    end
    return reply
  end
  local outcomes, news, ttls = {}, {}, {}
  local all = true
  for i = 1, m do
    outcomes[i], news[i], ttls[i] = check(params[i], states[i], now, amounts[i])
    if outcomes[i][1] == 0 then
      all = false
    end
  end
  local reply = {now, all and 1 or 0, all and 1 or 0}
  local expires = now + tonumber(ARGV[4])
  local charges = {'r', fmt(expires)}
  for i = 1, m do
    if not all and outcomes[i][1] == 1 then
      outcomes[i] = check(params[i], states[i], now, 0)
    end
    append(reply, outcomes[i])
    if all then
      local since = busy_since(states[i])
      if amounts[i] > 0 then
        write(KEYS[i], news[i], since, ttls[i])
      end
      charges[#charges + 1] = fmt(amounts[i]) .. ' ' .. fmt(since)
    end
  end
  if all and record_key then
    redis.call('SET', record_key, table.concat(charges, ' '), 'PX', ttl_ms(tonumber(ARGV[4])))
  end
  return reply
end

-- Settle one axis: give back (cost - actual) if still in the busy period it was charged
-- in, or charge an overrun up to an empty budget; write the state if it changed.
-- Returns the units refunded (negative: charged) and the new state.
local function apply(i, cost, charged_since, actual)
  local n, d, capacity = params[i][1], params[i][2], params[i][3]
  local state = states[i]
  local ahead = 0
  if state and state[1] >= now then
    ahead = (state[1] - now) * n + state[2]
  end
  local since = busy_since(state)
  local refunded
  if actual <= cost then
    local back = 0
    if ahead > 0 and since == charged_since then
      back = (cost - actual) * d
      if ahead < back then
        back = ahead
      end
    end
    ahead = ahead - back
    refunded = idiv(back, d)
  else
    local extra = (actual - cost) * d
    local left = capacity * d - ahead
    if left < 0 then
      left = 0
    end
    if left < extra then
      extra = left
    end
    ahead = ahead + extra
    refunded = -ceil_div(extra, d)
  end
  local new = nil
  if ahead > 0 then
    new = {now + idiv(ahead, n), ahead % n}
  end
  if refunded ~= 0 then
    write(KEYS[i], new, since, ceil_div(ahead, n))
  end
  return refunded, new
end

if op == 'charge' then
  local reply, news = {now, 1}, {}
  for i = 1, m do
    local refunded
    refunded, news[i] = apply(i, 0, 0, amounts[i])
    reply[#reply + 1] = -refunded
  end
  for i = 1, m do
    append(reply, (check(params[i], news[i], now, 0)))
  end
  return reply
end

-- settle
local words = record()
local charges = {}
if words and words[1] == 'r' then
  for i = 3, #words do
    charges[#charges + 1] = tonumber(words[i])
  end
end
if #charges ~= 2 * m then
  local status = 0
  if words and words[1] == 's' then
    status = 2
  end
  local reply = {now, status}
  for i = 1, m do
    reply[#reply + 1] = 0
  end
  for i = 1, m do
    append(reply, (check(params[i], states[i], now, 0)))
  end
  return reply
end

local reply, news = {now, 1}, {}
for i = 1, m do
  local refunded
  refunded, news[i] = apply(i, charges[2 * i - 1], charges[2 * i], amounts[i])
  reply[#reply + 1] = refunded
end
redis.call('SET', record_key, 's ' .. words[2], 'KEEPTTL')
for i = 1, m do
  append(reply, (check(params[i], news[i], now, 0)))
end
return reply
