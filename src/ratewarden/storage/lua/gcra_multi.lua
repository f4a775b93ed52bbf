-- gcra_multi.lua: GCRA on several axes of one key, a cost per axis, all or nothing;
-- and the refund of a reservation (settle), once per reservation id.
-- Mirrors ratewarden.algorithms._gcra_multi.run (same ARGV, same reply).
-- KEYS[1..m]  "tat_us frac since_us used p1 r1 p2 r2 ..." per axis (all with the budget key's
--             hash tag); since_us is when the axis last left rest, used the units charged
--             since then, and each (p, r) a refund of r units to the reservation charged at
--             position p (used just after it), at most 8, by position (see _gcra_multi.py:
--             why refunds need them; a state without used reads as 0, without pairs as none)
-- KEYS[m+1]   the reservation record (optional for reserve): "r expires_us c1 s1 u1 c2 s2 u2 ..."
--             while reserved (cost, busy period and used after it per axis; an older record
--             has no u), "s expires_us" once settled. A fair share's record (fair_share.lua
--             writes it) prices each axis: "c s u p q" per axis, and a settle charges that
--             axis ceil(amount * p / q) for the amount in ARGV.
--             Its expiry is kept in the value too, so that a test clock (ARGV[1]) sees it
--             expire; PX removes it on Redis time.
-- ARGV[1]     now in microseconds, or "" to read Redis TIME
-- ARGV[2]     "reserve" | "settle" | "charge" (usage that already happened, no record)
-- ARGV[3]     m, the number of axes
-- ARGV[4]     record ttl_us (reserve)
-- ARGV[5..]   per axis: n, d, capacity, amount (reserve: cost; settle: actual usage)
-- Reply       reserve: {now, allowed, status, per axis 6 numbers (see _prelude.lua)}
--               status 0 denied, 1 charged, 2 already reserved under this id (an open
--               record; a settled one is over, and the reserve is charged afresh)
--             settle: {now, status, per axis refunded units, per axis 6 numbers}
--               status 0 no such reservation, 1 settled, 2 already settled
--             charge: {now, 1, per axis units charged, per axis 6 numbers}

local now = now_us()
local op = ARGV[2]
local m = tonumber(ARGV[3])

local read = state_read -- the prelude's

-- Write an axis: its GCRA state, busy period, used, and the refunds it keeps (a flat
-- list of position, units pairs; empty when nil).
local function write(key, state, since, used, ttl_us, refunds)
  if state then
    local value = {state[1], state[2], since, used}
    for _, number in ipairs(refunds or {}) do
      value[#value + 1] = number
    end
    state_write(key, value, ttl_us)
  else
    redis.call('DEL', key)
  end
end

local function rested(state)
  return not state or state[1] < now or (state[1] == now and state[2] == 0)
end

-- The refunds an axis keeps in its busy period, as a flat list: each settled reservation's
-- position (used just after it was charged) and the units given back, by position; none
-- at rest (see _gcra_multi.py: a settle subtracts the refunds of later reservations from
-- what was charged after it).
local KEPT = 8
local function refunds_of(state)
  local found = {}
  if rested(state) then
    return found
  end
  for i = 5, #state - 1, 2 do
    found[#found + 1] = state[i]
    found[#found + 1] = state[i + 1]
  end
  return found
end

-- The units given back for reservations charged after ``position``.
local function refunded_after(refunds, position)
  local sum = 0
  for i = 1, #refunds - 1, 2 do
    if refunds[i] > position then
      sum = sum + refunds[i + 1]
    end
  end
  return sum
end

-- ``refunds`` with (position, units) added in order; past KEPT pairs, the two adjacent
-- pairs closest together become one at the lower position (a later settle then counts
-- fewer refunds after it, never more).
local function noted(refunds, position, units)
  local out, placed = {}, false
  for i = 1, #refunds - 1, 2 do
    local at, given = refunds[i], refunds[i + 1]
    if not placed and position < at then
      out[#out + 1] = position
      out[#out + 1] = units
      placed = true
    elseif not placed and position == at then
      given = given + units
      placed = true
    end
    out[#out + 1] = at
    out[#out + 1] = given
  end
  if not placed then
    out[#out + 1] = position
    out[#out + 1] = units
  end
  if #out > 2 * KEPT then
    local best = 1
    for i = 3, #out - 3, 2 do
      if out[i + 2] - out[i] < out[best + 2] - out[best] then
        best = i
      end
    end
    out[best + 1] = out[best + 1] + out[best + 3]
    table.remove(out, best + 2)
    table.remove(out, best + 2)
  end
  return out
end

-- When the axis left rest: kept while busy, now when a charge starts from rest.
local function busy_since(state)
  if rested(state) or not state[3] then
    return now
  end
  return state[3]
end

-- Units charged in the current busy period (0 at rest, or in an older state).
local function used_of(state)
  if rested(state) or not state[4] then
    return 0
  end
  return state[4]
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
  for j = 1, 6 do
    reply[#reply + 1] = outcome[j]
  end
end

-- reply, then each axis's 6 numbers as it is left in kept (a check of cost 0)
local function as_left(reply, kept)
  for i = 1, m do
    append(reply, (check(params[i], kept[i], now, 0)))
  end
  return reply
end

if op == 'reserve' then
  -- An open reservation under this id: a retried call, charged nothing again. One settled
  -- (or cancelled) is over: a reserve under its id is a new request, charged afresh.
  local held = record()
  if held and held[1] == 'r' then
    return as_left({now, 1, 2}, states)
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
      local used = used_of(states[i])
      if amounts[i] > 0 then
        used = used + amounts[i]
        write(KEYS[i], news[i], since, used, ttls[i], refunds_of(states[i]))
      end
      charges[#charges + 1] = fmt(amounts[i]) .. ' ' .. fmt(since) .. ' ' .. fmt(used)
    end
  end
  if all and record_key then
    redis.call('SET', record_key, table.concat(charges, ' '), 'PX', ttl_ms(tonumber(ARGV[4])))
  end
  return reply
end

-- Settle one axis: give back (cost - actual) if still in the busy period it was charged
-- in, never below now plus what was charged after it (charged_used: used just after it,
-- nil in an older record), or charge an overrun up to an empty budget; write the state if
-- it changed. Returns the units refunded (negative: charged) and the new state.
local function apply(i, cost, charged_since, charged_used, actual)
  local n, d, capacity = params[i][1], params[i][2], params[i][3]
  local state = states[i]
  local ahead = 0
  if state and state[1] >= now then
    ahead = (state[1] - now) * n + state[2]
  end
  local since = busy_since(state)
  local used = used_of(state)
  local refunds = refunds_of(state)
  local refunded
  if actual <= cost then
    local back = 0
    if ahead > 0 and since == charged_since then
      -- charged after this reservation and not given back since (see refunds_of)
      local later = 0
      if charged_used then
        later = used - charged_used - refunded_after(refunds, charged_used)
        if later < 0 then
          later = 0
        end
      end
      local room = ahead - later * d
      if room < 0 then
        room = 0
      end
      back = (cost - actual) * d
      if room < back then
        back = room
      end
    end
    ahead = ahead - back
    refunded = idiv(back, d)
    if refunded > 0 and charged_used then
      refunds = noted(refunds, charged_used, refunded)
    end
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
    used = used - refunded
  end
  local new = nil
  if ahead > 0 then
    new = {now + idiv(ahead, n), ahead % n}
  end
  if refunded ~= 0 then
    write(KEYS[i], new, since, used, ceil_div(ahead, n), refunds)
  end
  return refunded, new
end

if op == 'charge' then
  local reply, news = {now, 1}, {}
  for i = 1, m do
    local refunded
    refunded, news[i] = apply(i, 0, 0, 0, amounts[i])
    reply[#reply + 1] = -refunded
  end
  return as_left(reply, news)
end

-- settle
local words = record()
local charges = {}
if words and words[1] == 'r' then
  for i = 3, #words do
    charges[#charges + 1] = tonumber(words[i])
  end
end
-- cost, since, used per axis; 2 in a record from before used existed; 5 when priced
local width = 3
if #charges == 2 * m then
  width = 2
elseif #charges == 5 * m then
  width = 5
end
if #charges ~= width * m then
  local status = 0
  if words and words[1] == 's' then
    status = 2
  end
  local reply = {now, status}
  for i = 1, m do
    reply[#reply + 1] = 0
  end
  return as_left(reply, states)
end

local reply, news = {now, 1}, {}
for i = 1, m do
  local refunded
  local at = width * (i - 1)
  local charged_used = nil
  if width >= 3 then
    charged_used = charges[at + 3]
  end
  local actual = amounts[i]
  if width == 5 then
    actual = ceil_div(actual * charges[at + 4], charges[at + 5])
  end
  refunded, news[i] = apply(i, charges[at + 1], charges[at + 2], charged_used, actual)
  reply[#reply + 1] = refunded
end
redis.call('SET', record_key, 's ' .. words[2], 'KEEPTTL')
return as_left(reply, news)
