-- quota_shares.lua: one round of an RLQS bucket's shares on one replica, over the fleet's
-- demand. Mirrors ratewarden.storage.quota_shares.run (same ARGV, same reply).
-- KEYS[1]   hash of the bucket: member -> "demand demand_until tokens burst held_until
--           weight" (a member is one Envoy stream on one replica; demand in milli-requests
--           per fill interval; until times in microseconds; a share is held while
--           held_until > now, a demand counts while demand_until > now; no weight: 1)
-- ARGV[1]   now in microseconds, or "" to read Redis TIME
-- ARGV[2]   the budget's tokens per fill L   ARGV[3] its burst B
-- ARGV[4]   hold_us: how long a share sent now may be enforced (TTL plus an interval);
--           a demand recorded now counts as long
-- ARGV[5]   1: the rule has weights (weighted max-min fair split), 0: split by demand
-- ARGV[6]   k, this replica's members in the round
-- ARGV[7]   spent: the capacity this replica's changed shares handed out within its
--           change window (-1: no budget of changes)
-- ARGV[8 .. 7+5k] per member: member, demand, weight, and the share it holds now
--           (tokens, burst; 0 0 for none)
-- ARGV[8+5k ..] this replica's departed members: their demand is dropped, their share
--           stays held until its held_until
-- Reply     {members with a demand fleet-wide, tokens held by the others, the capacity
--           this round's changed shares hand out, the changes it held back, then for each
--           of the k members in order: tokens, burst}
--
-- The fair split is shares.split's, over every member with a demand (this replica's
-- first, then the others by name). By demand: each weighs its demand plus an even part of
-- the spare when the fleet asks for no more than L, its demand when it asks for more.
-- Weighted: its demand plus its weight's part of the spare under L; over L, water-filling
-- (from the smallest demand per weight, each gets its demand while that is within its
-- weight's part of what is left, then the rest get their weight's part). This
-- replica's members get their fair tokens, but never more than L less what the others
-- hold, so the shares held fleet-wide never add up to more than L; and their burst is
-- their fair part, never more than max(B, holders) less what the others hold, with at
-- least one token each (the weakest get nothing when there is no room for one).
-- Then the budget of changes (hold_back in the twin): a change to a non-empty share costs
-- its burst (Envoy starts it full); when the changes cost more than max(B, members) less
-- spent, shrinking changes go first, then the cheapest, each made only while it fits the
-- room and the shares still fit beside the others'; the rest keep what they hold.

local now = now_us()
local L, B, hold = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local weighted, k, spent = tonumber(ARGV[5]) == 1, tonumber(ARGV[6]), tonumber(ARGV[7])

local function apportion(total, w)
  local parts, whole = {}, 0
  for i = 1, #w do
    whole = whole + w[i]
    parts[i] = 0
  end
  if total <= 0 or whole <= 0 then
    return parts
  end
  local rest, order, used = {}, {}, 0
  for i = 1, #w do
    local q = total * w[i] / whole
    parts[i] = math.floor(q)
    rest[i] = q - parts[i]
    used = used + parts[i]
    order[i] = i
  end
  table.sort(order, function(a, b)
    if rest[a] ~= rest[b] then
      return rest[a] > rest[b]
    end
    return a < b
  end)
  for j = 1, math.min(total - used, #w) do
    parts[order[j]] = parts[order[j]] + 1
  end
  return parts
end

local entries = {}
local raw = redis.call('HGETALL', KEYS[1])
for i = 1, #raw, 2 do
  local e, at = {}, 1
  local value = raw[i + 1]
  while true do
    local sep = string.find(value, ' ', at, true)
    if not sep then
      e[#e + 1] = tonumber(string.sub(value, at))
      break
    end
    e[#e + 1] = tonumber(string.sub(value, at, sep - 1))
    at = sep + 1
  end
  entries[raw[i]] = e
end

local mine, demand, weight, had_t, had_b = {}, {}, {}, {}, {}
for i = 1, k do
  mine[i] = ARGV[3 + 5 * i]
  demand[i] = tonumber(ARGV[4 + 5 * i])
  weight[i] = tonumber(ARGV[5 + 5 * i])
  had_t[i] = tonumber(ARGV[6 + 5 * i])
  had_b[i] = tonumber(ARGV[7 + 5 * i])
  if had_t[i] <= 0 then
    had_t[i], had_b[i] = 0, 0
  end
end
local is_mine = {}
for i = 1, k do
  is_mine[mine[i]] = true
  entries[mine[i]] = nil
end
for i = 8 + 5 * k, #ARGV do
  local e = entries[ARGV[i]]
  if e and not is_mine[ARGV[i]] then
    e[2] = 0
  end
end

-- The others: drop what counts no more; sum what they hold.
local others, held_t, held_b, holders = {}, 0, 0, 0
for name, e in pairs(entries) do
  if e[2] <= now and e[5] <= now then
    redis.call('HDEL', KEYS[1], name)
    entries[name] = nil
  else
    if e[2] > now then
      others[#others + 1] = name
    end
    if e[5] > now and e[3] > 0 then
      held_t = held_t + e[3]
      held_b = held_b + e[4]
      holders = holders + 1
    end
  end
end
table.sort(others)

-- The fair split over every member with a demand, this replica's first.
local d, wt = {}, {}
for i = 1, k do
  d[i] = demand[i]
  wt[i] = weight[i]
end
for j = 1, #others do
  d[k + j] = entries[others[j]][1]
  wt[k + j] = entries[others[j]][6] or 1
end
local n, asked, whole, Lm = #d, 0, 0, L * 1000
for i = 1, n do
  asked = asked + d[i]
  whole = whole + wt[i]
end
local w = {}
if not weighted then
  for i = 1, n do
    if asked == 0 then
      w[i] = 1
    elseif asked <= Lm then
      w[i] = n * d[i] + (Lm - asked)
    else
      w[i] = d[i]
    end
  end
elseif asked == 0 then
  for i = 1, n do
    w[i] = wt[i]
  end
elseif asked <= Lm then
  for i = 1, n do
    w[i] = d[i] + (Lm - asked) * wt[i] / whole
  end
else
  local order, left = {}, Lm
  for i = 1, n do
    order[i] = i
    w[i] = 0
  end
  table.sort(order, function(a, b)
    local ra, rb = d[a] / wt[a], d[b] / wt[b]
    if ra ~= rb then
      return ra < rb
    end
    return a < b
  end)
  for place = 1, n do
    local i = order[place]
    if d[i] * whole > left * wt[i] then
      for j = place, n do
        w[order[j]] = left * wt[order[j]] / whole
      end
      break
    end
    w[i] = d[i]
    left = left - d[i]
    whole = whole - wt[i]
  end
end
local fair = apportion(L, w)
local fw, fi = {}, {}
for i = 1, n do
  if fair[i] > 0 then
    fw[#fw + 1] = w[i]
    fi[#fi + 1] = i
  end
end
local fair_burst = apportion(B, fw)
local fair_t, fair_b = 0, 0
for i = 1, k do
  fair_t = fair_t + fair[i]
end
for j = 1, #fi do
  if fi[j] <= k then
    fair_b = fair_b + fair_burst[j]
  end
end

-- This replica's part: its fair tokens within what the others leave.
local pool = math.min(fair_t, L - held_t)
if pool < 0 then
  pool = 0
end
local my_w = {}
for i = 1, k do
  my_w[i] = w[i]
end
local tokens = apportion(pool, my_w)
local ranked = {}
for i = 1, k do
  if tokens[i] > 0 then
    ranked[#ranked + 1] = i
  end
end
table.sort(ranked, function(a, b)
  if w[a] ~= w[b] then
    return w[a] > w[b]
  end
  return a < b
end)
local keep = #ranked
while keep > 0 and math.max(B, holders + keep) - held_b < keep do
  keep = keep - 1
end
for j = keep + 1, #ranked do
  tokens[ranked[j]] = 0
end
local kept, kw = {}, {}
for i = 1, k do
  if tokens[i] > 0 then
    kept[#kept + 1] = i
    kw[#kw + 1] = w[i]
  end
end
local room = math.min(fair_b, B - held_b)
if room < keep then
  room = keep
end
local burst = apportion(room, kw)
for slot = 1, #burst do
  if burst[slot] == 0 then
    local largest = 1
    for j = 2, #burst do
      if burst[j] > burst[largest] then
        largest = j
      end
    end
    if burst[largest] > 1 then
      burst[largest] = burst[largest] - 1
    end
    burst[slot] = 1
  end
end
local my_b = {}
for i = 1, k do
  my_b[i] = 0
end
for slot = 1, #kept do
  my_b[kept[slot]] = burst[slot]
end

-- The budget of changes: what does not fit keeps what it holds.
local changed, cost = {}, 0
for i = 1, k do
  if tokens[i] > 0 and (tokens[i] ~= had_t[i] or my_b[i] ~= had_b[i]) then
    changed[#changed + 1] = i
    cost = cost + my_b[i]
  end
end
local room = math.max(B, n) - spent
local spent_now, held_back = cost, 0
if spent >= 0 and cost > room then
  local ct, cb = {}, {}
  local sum_t, sum_b, count = 0, 0, 0
  for i = 1, k do
    if tokens[i] == 0 then
      ct[i], cb[i] = 0, 0
    else
      ct[i], cb[i] = had_t[i], had_b[i]
    end
    if ct[i] > 0 then
      sum_t, sum_b, count = sum_t + ct[i], sum_b + cb[i], count + 1
    end
  end
  local function fits(t, b, c)
    return t <= L - held_t and held_b + b <= math.max(B, holders + c)
  end
  if fits(sum_t, sum_b, count) then
    table.sort(changed, function(a, b)
      local ga, gb = tokens[a] > had_t[a], tokens[b] > had_t[b]
      if ga ~= gb then
        return gb
      end
      if my_b[a] ~= my_b[b] then
        return my_b[a] < my_b[b]
      end
      return a < b
    end)
    spent_now = 0
    for j = 1, #changed do
      local i = changed[j]
      if spent_now + my_b[i] <= room then
        local new_t, new_b, new_c = sum_t - ct[i] + tokens[i], sum_b - cb[i] + my_b[i], count
        if ct[i] == 0 then
          new_c = count + 1
        end
        if fits(new_t, new_b, new_c) then
          ct[i], cb[i] = tokens[i], my_b[i]
          sum_t, sum_b, count = new_t, new_b, new_c
          spent_now = spent_now + my_b[i]
        end
      end
      if ct[i] ~= tokens[i] or cb[i] ~= my_b[i] then
        held_back = held_back + 1
      end
    end
    for i = 1, k do
      tokens[i], my_b[i] = ct[i], cb[i]
    end
  end
end

local reply = {n, held_t, spent_now, held_back}
local last = now
for i = 1, k do
  local until_held = 0
  if tokens[i] > 0 then
    until_held = now + hold
  end
  redis.call('HSET', KEYS[1], mine[i],
    fmt(demand[i]) .. ' ' .. fmt(now + hold) .. ' ' .. fmt(tokens[i]) .. ' ' .. fmt(my_b[i])
    .. ' ' .. fmt(until_held) .. ' ' .. fmt(weight[i]))
  last = now + hold
  reply[#reply + 1] = tokens[i]
  reply[#reply + 1] = my_b[i]
end
for name, e in pairs(entries) do
  last = math.max(last, e[2], e[5])
end
for i = 8 + 5 * k, #ARGV do
  local e = entries[ARGV[i]]
  if e and not is_mine[ARGV[i]] then
    redis.call('HSET', KEYS[1], ARGV[i], fmt(e[1]) .. ' ' .. fmt(e[2]) .. ' ' .. fmt(e[3])
      .. ' ' .. fmt(e[4]) .. ' ' .. fmt(e[5]) .. ' ' .. fmt(e[6] or 1))
  end
end
if last > now then
  redis.call('PEXPIRE', KEYS[1], ttl_ms(last - now))
else
  redis.call('DEL', KEYS[1])
end
return reply
