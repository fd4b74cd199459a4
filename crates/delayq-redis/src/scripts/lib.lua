-- delayq: the prelude shared by every script that works on one (topic, partition).
--
-- KEYS (all under the partition's hash tag, so one slot):
--   1..6  the tasks in each state, scored by due:
--         1 delayed, 2 ready, 3 active, 4 finished, 5 cancelled, 6 dead
--   7     active tasks scored by ttr deadline
--   8     finished tasks scored by the end of their retention
--   9     cancelled tasks scored by the end of their retention
--   10    (tick only) the partition's fencing token
-- ARGV:
--   1 the partition's key base, e.g. "dq:{orders#3}:"; a task's record is base .. "t:" .. id
--   2 now (epoch ms, from the caller's clock: scripts never read TIME)
--   3 the events channel   4 the calling instance   5 the topic   6 the partition
--   7 retention (ms)       8 the PEXPIRE backstop of retained records (ms)
--   9.. the script's own arguments
--
-- A task's record is a hash: b body, s state code, d due, c created, u updated (absent: c),
-- t ttr, m max retries (-1: no limit), r retries (absent: 0), k backoff JSON, x deadline
-- (ACTIVE: ttr deadline; FINISHED/CANCELLED: end of retention), p receipt (ACTIVE),
-- e last error, h history (one JSON object per line, at most HISTORY lines).

local BASE = ARGV[1]
local NOW = tonumber(ARGV[2])
local CHANNEL = ARGV[3]
local ORIGIN = ARGV[4]
local TOPIC = ARGV[5]
local PARTITION = ARGV[6]
local RETENTION = tonumber(ARGV[7])
local BACKSTOP = ARGV[8]

local DELAYED, READY, ACTIVE, FINISHED, CANCELLED, DEAD = 0, 1, 2, 3, 4, 5
local SETS = {[0] = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]}
local DEADLINES = KEYS[7]
local EXPIRY = {[FINISHED] = KEYS[8], [CANCELLED] = KEYS[9]}
local HISTORY = 16

-- What the script did that others must hear of: tasks that became ready (wake consumers) and
-- the earliest new timer that may be earlier than what the partition's promoter sleeps until.
local READY_N = 0
local WAKE = nil
local DEAD_N = 0
local HEADS = {}

local function tkey(id)
  return BASE .. 't:' .. id
end

local function fmt(n)
  return string.format('%d', n)
end

local function head_score(key)
  local h = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if h[2] then
    return tonumber(h[2])
  end
  return nil
end

-- Adds `id` at time `t` to a timer set (delayed, deadlines, expiry), noting a wake-up when it
-- lands before the set's earliest entry as it was when this script first looked.
local function index_timer(key, t, id)
  local h = HEADS[key]
  if h == nil then
    h = head_score(key) or false
    HEADS[key] = h
  end
  if h == false or t < h then
    HEADS[key] = t
    if WAKE == nil or t < WAKE then
      WAKE = t
    end
  end
  redis.call('ZADD', key, t, id)
end

-- Removes a record and every index entry of it.
local function purge(rec)
  redis.call('ZREM', SETS[rec.state], rec.id)
  if rec.state == ACTIVE then
    redis.call('ZREM', DEADLINES, rec.id)
  elseif EXPIRY[rec.state] then
    redis.call('ZREM', EXPIRY[rec.state], rec.id)
  end
  redis.call('DEL', tkey(rec.id))
end

-- Reads what a transition needs; nil when the task does not exist or its retention has
-- passed (such a record is purged here, exactly at `now`, whatever the promoter's lag).
local function load(id)
  local v = redis.call('HMGET', tkey(id), 's', 'd', 'x', 'p', 'r', 'm', 'u', 'c', 't', 'k')
  if not v[1] then
    return nil
  end
  local rec = {
    id = id,
    state = tonumber(v[1]),
    due = tonumber(v[2]),
    deadline = tonumber(v[3] or 0),
    receipt = v[4] or '',
    retries = tonumber(v[5] or 0),
    max = tonumber(v[6]),
    updated = tonumber(v[7] or v[8]),
    ttr = tonumber(v[9]),
    backoff = v[10] or '',
  }
  if (rec.state == FINISHED or rec.state == CANCELLED) and rec.deadline <= NOW then
    purge(rec)
    return nil
  end
  return rec
end

-- Takes a record out of the indexes of its current state.
local function leave(rec)
  redis.call('ZREM', SETS[rec.state], rec.id)
  if rec.state == ACTIVE then
    redis.call('ZREM', DEADLINES, rec.id)
  elseif EXPIRY[rec.state] then
    redis.call('ZREM', EXPIRY[rec.state], rec.id)
  end
end

-- Puts a record (already out of its old indexes) into `state` with due `due`. ACTIVE is
-- entered by pop itself, which also sets the receipt and the ttr deadline.
local function enter(id, state, due)
  local key = tkey(id)
  if state == DELAYED then
    index_timer(SETS[DELAYED], due, id)
  else
    redis.call('ZADD', SETS[state], due, id)
  end
  if state == FINISHED or state == CANCELLED then
    local until_ms = NOW + RETENTION
    redis.call('HSET', key, 's', state, 'd', due, 'u', NOW, 'x', until_ms)
    redis.call('HDEL', key, 'p')
    index_timer(EXPIRY[state], until_ms, id)
    redis.call('PEXPIRE', key, BACKSTOP)
  else
    redis.call('HSET', key, 's', state, 'd', due, 'u', NOW)
    redis.call('HDEL', key, 'x', 'p')
  end
  if state == READY then
    READY_N = READY_N + 1
  end
end

-- The wait before the n-th redelivery, exactly as delayq_core::backoff::Backoff::delay_for.
local function backoff_delay(json, n)
  if json == '' then
    return 0
  end
  local b = cjson.decode(json)
  if n < 1 then
    n = 1
  end
  if b.kind == 'fixed' then
    return b.ms
  elseif b.kind == 'exponential' then
    return math.min(b.base_ms * 2 ^ math.min(n - 1, 63), b.max_ms)
  elseif b.kind == 'schedule' then
    local ms = b.ms
    if #ms == 0 then
      return 0
    end
    return ms[math.min(n, #ms)]
  end
  return 0
end

-- Appends a failed attempt to the bounded history.
local function push_history(key, started, outcome, err)
  local entry = string.format('{"started_at_ms":%d,"ended_at_ms":%d,"outcome":"%s"', started, NOW, outcome)
  if err then
    entry = entry .. ',"error":' .. cjson.encode(err)
  end
  entry = entry .. '}'
  local h = redis.call('HGET', key, 'h')
  if h then
    local lines = 1
    for _ in string.gmatch(h, '\n') do
      lines = lines + 1
    end
    if lines >= HISTORY then
      h = string.sub(h, string.find(h, '\n', 1, true) + 1)
    end
    entry = h .. '\n' .. entry
  end
  redis.call('HSET', key, 'h', entry)
end

-- A failed attempt of an ACTIVE task (release or ttr expiry), exactly as
-- delayq_core::lifecycle::after_failure decides it. `delay` is the consumer's override or nil.
-- Returns the new state.
local function fail(rec, delay, outcome, err)
  local key = tkey(rec.id)
  push_history(key, rec.updated, outcome, err)
  if err then
    redis.call('HSET', key, 'e', err)
  end
  leave(rec)
  if rec.max >= 0 and rec.retries >= rec.max then
    DEAD_N = DEAD_N + 1
    enter(rec.id, DEAD, rec.due)
    return DEAD
  end
  local retries = rec.retries + 1
  redis.call('HSET', key, 'r', retries)
  local wait = delay
  if wait == nil then
    wait = backoff_delay(rec.backoff, retries)
  end
  local due = NOW + wait
  if due <= NOW then
    -- An immediate redelivery keeps its original due, so it goes to the front.
    enter(rec.id, READY, rec.due)
    return READY
  end
  enter(rec.id, DELAYED, due)
  return DELAYED
end

-- Moves up to `limit` due DELAYED tasks to READY. Returns their due times.
local function promote(limit)
  local due = redis.call('ZRANGEBYSCORE', SETS[DELAYED], '-inf', NOW, 'WITHSCORES', 'LIMIT', 0, limit)
  local dues = {}
  if #due == 0 then
    return dues
  end
  local ids = {}
  local add = {}
  for i = 1, #due, 2 do
    local id, d = due[i], due[i + 1]
    ids[#ids + 1] = id
    add[#add + 1] = d
    add[#add + 1] = id
    dues[#dues + 1] = tonumber(d)
    redis.call('HSET', tkey(id), 's', READY, 'u', NOW)
  end
  redis.call('ZREM', SETS[DELAYED], unpack(ids))
  redis.call('ZADD', SETS[READY], unpack(add))
  READY_N = READY_N + #ids
  return dues
end

-- Tells the other instances what happened; this instance handles its own events directly.
local function publish()
  if READY_N > 0 then
    redis.call('PUBLISH', CHANNEL, 'r ' .. ORIGIN .. ' ' .. TOPIC .. ' ' .. READY_N)
  end
  if WAKE then
    redis.call('PUBLISH', CHANNEL, 'w ' .. ORIGIN .. ' ' .. TOPIC .. ' ' .. PARTITION .. ' ' .. fmt(WAKE))
  end
end

-- Every reply starts with: status, tasks made ready, earliest new timer (-1: none), tasks
-- that went DEAD. Status: 0 ok, -1 not found, -2 wrong state (then the state), -3 stale
-- receipt, -4 fenced off.
local function reply(status, payload)
  publish()
  local out = {status, READY_N, WAKE or -1, DEAD_N}
  if payload then
    for _, v in ipairs(payload) do
      out[#out + 1] = v
    end
  end
  return out
end

local function refuse(status, state)
  return {status, 0, -1, 0, state or 0}
end

