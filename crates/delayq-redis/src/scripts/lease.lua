-- lease: one instance's heartbeat and lease round, over keys of one slot.
-- KEYS[1] the live instances (a sorted set scored by heartbeat expiry, Redis time),
-- KEYS[2] the fencing token counter, KEYS[3..] the lease of each bucket of partitions.
-- ARGV[1] the instance id, ARGV[2] the lease time (ms), ARGV[3] a rotation offset for the
-- buckets it acquires, ARGV[4] 'tick' or 'release', ARGV[5] the lowest token a new lease
-- may get (a partition's fence was found above the counter), ARGV[6..] buckets to give up
-- first (their tick was fenced off) and take anew with a fresh token.
-- A lease's value is "<instance>:<token>". A tick renews the instance's heartbeat, keeps and
-- renews its leases up to its fair share (ceil(buckets / live instances)), gives up the rest,
-- and acquires free buckets up to its share, each with a new token.
-- Reply: bucket index (from 0), token, ... for every bucket held after the round.
-- Liveness uses Redis's clock (TIME): it is shared by all instances, unlike theirs.
local me = ARGV[1]
local lease = tonumber(ARGV[2])
local n = #KEYS - 2

local function owner(v)
  local sep = string.find(v, ':', 1, true)
  if not sep then
    return v, '0'
  end
  return string.sub(v, 1, sep - 1), string.sub(v, sep + 1)
end

if ARGV[4] == 'release' then
  redis.call('ZREM', KEYS[1], me)
  local values = redis.call('MGET', unpack(KEYS, 3))
  for i = 1, n do
    local v = values[i]
    if v and owner(v) == me then
      redis.call('DEL', KEYS[i + 2])
    end
  end
  return {}
end

local floor = tonumber(ARGV[5] or '0')
if floor > 0 and tonumber(redis.call('GET', KEYS[2]) or '0') < floor then
  redis.call('SET', KEYS[2], floor)
end
for i = 6, #ARGV do
  local key = KEYS[tonumber(ARGV[i]) + 3]
  local v = key and redis.call('GET', key)
  if v and owner(v) == me then
    redis.call('DEL', key)
  end
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + lease, me)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%d', now))
local live = redis.call('ZCARD', KEYS[1])
local share = math.ceil(n / live)

local mine = {}
local free = {}
local values = redis.call('MGET', unpack(KEYS, 3))
for i = 1, n do
  local v = values[i]
  if v then
    local who, token = owner(v)
    if who == me then
      mine[#mine + 1] = {i, token}
    end
  else
    free[#free + 1] = i
  end
end

local held = {}
for j, m in ipairs(mine) do
  if j <= share then
    redis.call('PEXPIRE', KEYS[m[1] + 2], lease)
    held[#held + 1] = m[1] - 1
    held[#held + 1] = tonumber(m[2])
  else
    redis.call('DEL', KEYS[m[1] + 2])
  end
end
local count = math.min(#mine, share)
local offset = tonumber(ARGV[3])
for j = 1, #free do
  if count >= share then
    break
  end
  local i = free[((j - 1 + offset) % #free) + 1]
  local token = redis.call('INCR', KEYS[2])
  redis.call('SET', KEYS[i + 2], me .. ':' .. token, 'PX', lease)
  held[#held + 1] = i - 1
  held[#held + 1] = token
  count = count + 1
end
return held
