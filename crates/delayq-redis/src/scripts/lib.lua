-- delayq: the prelude shared by every script that works on one (topic, partition).
--
-- KEYS (all under the partition's hash tag, so one slot):
--   1..6  the tasks in each state, scored by due:
--         1 delayed, 2 ready, 3 active, 4 finished, 5 cancelled, 6 dead
--   7     active tasks scored by ttr deadline
--   8     finished tasks scored by the end of their retention
--   9     cancelled tasks scored by the end of their retention
--   10    the records: a hash, task id -> packed record (below)
--   11    the extras: a hash, task id -> what only some tasks have (below)
--   12    the partition's info: a hash with `v` (the index format, 2), `pause` (absent:
--         not paused; -1: until resumed; else the epoch ms at which the pause ends),
--         `expired` (how many tasks expired, cumulative), and for a topic with flow limits
--         `limits` (`<max_active>,<ms between hand-outs>,<burst>,<max_active_per_key>`,
--         empty parts: none; the last part was added later and may be missing; a fifth
--         part `g` when the topic has several partitions, see "Topic-wide limits" below) and
--         `tat` (the rate's theoretical arrival time, see `allowance`)
--   13    DELAYED and READY tasks that have an expiry, scored by it (docs/flow-control.md)
--   14    READY tasks held back by their key's max_active_per_key, as in READY (below)
--   15    keyed READY tasks (held or not) in their key's order: one sorted set of score 0
--         whose members `<key> <priority: 8 hex digits><READY member>` sort by key, then
--         as READY does (ZRANGEBYLEX reads one key's order)
--   16    ACTIVE tasks per key: a hash, key -> how many (keyed tasks only)
--   17    keys blocked by the topic-wide per-key limit: a sorted set, key -> until when
--         (epoch ms), see "Topic-wide limits" below
--   18    (tick only) the partition's fencing token
--
-- The READY and DEAD sets do not hold bare ids: a sorted set orders by one double and then
-- by member bytes, and rule 11 needs three keys (priority, due, insertion). So:
--   READY: score = priority (exact: < 2^32), member = due (12 hex digits) .. insertion
--          number (16 hex digits) .. id: equal scores sort by member bytes, i.e. by due,
--          then insertion.
--   DEAD:  score = when the task went DEAD, member = insertion number .. id: oldest buried
--          first, then insertion.
-- The insertion number is given by the adding instance (its clock's ms << 20 plus a
-- counter, so it orders a topic's tasks across partitions too) and is only ever handled as
-- a 16-hex-digit string here: it does not fit a Lua number exactly.
-- With a max_active_per_key, READY holds of each key only the first tasks in its order that
-- may go (max_active_per_key less the key's ACTIVE tasks): the rest wait in 14, so a pop
-- takes READY's first tasks without walking past held ones, and a busy key holds back no
-- other key. Every change of a key's tasks restores that window (`settle`).
-- Topic-wide limits. A topic of several partitions spans several slots of a Cluster, and a
-- script sees one slot, so its limits are counted in a slot of their own, the topic's
-- permits (the `permit_*` functions at the end, over `{<topic>#flow}` keys): each ACTIVE task
-- of such a topic holds a permit, its receipt, until its ttr deadline. A pop takes the first
-- READY tasks of every partition as candidates (peek), asks the permits for them in rule
-- 11's order (`permit_grant`: topic room, rate token and key room, each permit until the
-- start of its ttr window plus the ttr plus a grace), hands out exactly the granted ones
-- (`flow_take`, which refuses a grant whose ttr would end after its permit), then settles the
-- permits to the tasks' deadlines and gives the unused ones back (`permit_release`). A task
-- that leaves ACTIVE names its receipt in the reply (`FREED_R`) so the instance gives its
-- permit back; a reply lost on the way only keeps the permit until its expiry. So the
-- permits never number fewer than the ACTIVE tasks, whatever fails between the steps. Here a
-- partition of such a topic marks its limits global: it hands nothing out by `hand_out`,
-- keeps its keys' windows against its own ACTIVE tasks (an upper bound of the topic's room)
-- and holds back a key the permits refused until the key has a free permit (KEYS[17]).
-- The other sets hold bare ids scored by due (or deadline). Partitions written by the
-- previous version (bare ids everywhere, no `v`) are converted by `upgrade` below, which
-- every script runs first.
-- ARGV:
--   1 now (epoch ms, from the caller's clock: task scripts never read TIME): the clock's lower
--     bound, or `lower:upper` when the upper bound is above it. Due times are judged by the
--     lower bound (never early); the windows given to a consumer or a backoff (ttr, release
--     delay, backoff) start at the upper one, so they never end before their length.
--   2 the events channel   3 the calling instance   4 the topic   5 the partition
--   6 retention (ms)
--   7.. the script's own arguments
--
-- A record is one string: a header, a newline, then the body. The header (short, because it
-- is paid once per task) is
--   <state letter><created>,<due>,<insertion>,<updated>,<ttr>,<max>,<retries>,<deadline>,<receipt>,<priority>,<trace>,<expiry>,<key>
-- The state letter is `a` (DELAYED) .. `f` (DEAD). Numbers are base 36; due, updated and
-- deadline are signed offsets from created ('-' before a negative one). The insertion number
-- is its counter (low 20 bits), then '.' and the offset of its millisecond from created when
-- that is not 0. Empty fields hold defaults: insertion none, updated = created, ttr 30000,
-- max retries 3 (-1: no limit), retries 0, no deadline (ACTIVE: ttr deadline;
-- FINISHED/CANCELLED: end of retention), no receipt (ACTIVE only), priority 1024, no trace
-- context, no expiry; trailing empty fields are left out. The trace context (only a task
-- added with one has it) is written by record.rs and kept here as an opaque string: it holds
-- no comma. The expiry (only a task added with one has it) is its offset from created, then
-- '!' when the task is deleted at its expiry instead of going DEAD. The key (only a task
-- added with one has it) is its flow-control key: the id's character set, so no comma,
-- space or newline.
-- Records written before begin with the state's digit and hold decimal fields: state, due,
-- created, updated, ttr, max, retries, deadline, receipt, priority, insertion (16 hex
-- digits); the oldest end after the receipt. `load` reads both,
-- `save` writes the short form. `src/record.rs` encodes and parses the same on the Rust side.
-- One string per task in one hash per partition keeps a delayed task small: a 100-byte body
-- would push a hash per task out of Redis's compact encoding.
--
-- Extras are three parts separated by NUL bytes: the backoff as JSON (empty: none), the last
-- error as a JSON string (empty: none), the history (one JSON object per line, at most
-- HISTORY lines). Most tasks have none.

-- This file is the top of a function library, run once when Redis loads it (FUNCTION LOAD);
-- its locals outlive a call. Each partition function runs `begin` (at the end) first: it sets
-- what the call gives (ARGV, KEYS) and resets every local a call changes.
local NOW, UPPER, CHANNEL, ORIGIN, TOPIC, PARTITION, RETENTION

local DELAYED, READY, ACTIVE, FINISHED, CANCELLED, DEAD = 0, 1, 2, 3, 4, 5
local SETS, DEADLINES, EXPIRY, RECORDS, EXTRAS, INFO, EXPIRIES, HELD, KORDER, KACTIVE, BLOCKED
-- The last error of a task that expired into DEAD.
local EXPIRED = 'expired'
local HISTORY = 16
local DEFAULT_PRIORITY = 1024
-- The width of the due and of the insertion number in READY and DEAD members (hex digits).
local WIDTH = 12
local WIDTH_MAX = 2 ^ 48 - 1
local SEQ_WIDTH = 16
local NO_SEQ = '0000000000000000'

-- What the script did that others must hear of: tasks that became ready (wake consumers) and
-- the earliest new timer that may be earlier than what the partition's promoter sleeps until.
local READY_N = 0
local WAKE = nil
local DEAD_N = 0
-- Tasks whose expiry this script applied (DEAD or deleted).
local EXPIRED_N = 0
local HEADS = {}
-- How many due entries the last promote() looked at (a full batch means: call again).
local SCANNED = 0
-- How many tasks left ACTIVE: a topic that was at its max_active then has slots to announce.
local FREED = 0
-- Held keyed tasks this call moved into READY (their key got room).
local MOVED = 0
-- The receipts of the tasks that left ACTIVE in a partition whose limits are topic-wide:
-- their permits to give back.
local FREED_R = {}
-- The latest `now` a tick of the partition ran at, once read (`since_tick`).
local TICKED = nil
-- The keys of a topic's permits (the `permit_*` functions, see the end).
local P_PERMITS, P_KEYS, P_KACTIVE, P_INFO, P_BLOCKS
-- The receipts a permit function freed, and the keys whose holds it lifted: {key, partitions}.
local P_FREED, P_UNBLOCK = 0, {}
-- The partition's flow limits as `limits` read them this call (nil: not read yet; false: none).
local LIM = nil

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

-- Notes a wake-up when a timer at `t` lands before the timer set's earliest entry as it was
-- when this script first looked.
local function note_timer(key, t)
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
end

-- Adds `id` at time `t` to a timer set (delayed, deadlines, expiry).
local function index_timer(key, t, id)
  note_timer(key, t)
  redis.call('ZADD', key, t, id)
end

-- Base 36 (lower case), '-' before a negative number: the numbers of a record's header.
local DIGITS = '0123456789abcdefghijklmnopqrstuvwxyz'
local function b36(n)
  if n < 0 then
    return '-' .. b36(-n)
  end
  local t, i = {}, 13
  repeat
    local d = n % 36
    t[i] = string.sub(DIGITS, d + 1, d + 1)
    i = i - 1
    n = (n - d) / 36
  until n == 0
  return table.concat(t, '', i + 1, 13)
end

-- A base-36 header field ('-' allowed); nil when empty.
local function n36(s)
  if s == nil or s == '' then
    return nil
  elseif string.byte(s, 1) == 45 then
    return -tonumber(string.sub(s, 2), 36)
  end
  return tonumber(s, 36)
end

local DEFAULT_TTR, DEFAULT_MAX = 30000, 3
-- The thirteen fields of a short header after its state letter (spelled out: the library's top
-- runs at load, where Redis 7.0 gives no `string` library).
local SHORT_HEADER = '^.([^,\n]*),([^,\n]*),?([^,\n]*),?([^,\n]*),?([^,\n]*),?([^,\n]*),?([^,\n]*),?([^,\n]*),?([^,\n]*),?([^,\n]*),?([^,\n]*),?([^,\n]*),?([^,\n]*)'

-- The header of a record (the short form above). Created and the insertion number never
-- change, and the due rarely does: their text as loaded is reused, so a promotion encodes
-- only the new `updated`.
local function header(rec)
  local c = rec.created
  local due = rec.due36
  if rec.due ~= rec.due0 or not due then
    due = b36(rec.due - c)
  end
  local seq = rec.seq36
  if not seq then
    seq = ''
    if rec.seq ~= NO_SEQ then
      local ms = tonumber(string.sub(rec.seq, 1, WIDTH - 1), 16)
      seq = b36(tonumber(string.sub(rec.seq, WIDTH), 16))
      if ms ~= c then
        seq = seq .. '.' .. b36(ms - c)
      end
    end
  end
  -- The trace context (record.rs writes it; opaque here) is kept through every transition.
  local f = {due, seq, '', '', '', '', '', rec.receipt, '', rec.trace, '', rec.key or ''}
  if rec.expires then
    f[11] = b36(rec.expires - c)
    if rec.drop then
      f[11] = f[11] .. '!'
    end
  end
  if rec.updated and rec.updated ~= c then
    f[3] = b36(rec.updated - c)
  end
  if rec.ttr ~= DEFAULT_TTR then
    f[4] = b36(rec.ttr)
  end
  if rec.max ~= DEFAULT_MAX then
    f[5] = b36(rec.max)
  end
  if rec.retries ~= 0 then
    f[6] = b36(rec.retries)
  end
  if rec.deadline ~= 0 then
    f[7] = b36(rec.deadline - c)
  end
  if rec.pri ~= DEFAULT_PRIORITY then
    f[9] = b36(rec.pri)
  end
  local n = 12
  while f[n] == '' do
    n = n - 1
  end
  return string.char(97 + rec.state) .. (rec.c36 or b36(c)) .. ',' .. table.concat(f, ',', 1, n)
end

-- A fixed-width hex number (clamped: order beyond 2^48 ms, the year 10889, is not kept).
local function hex(n)
  return string.format('%012x', math.min(math.max(n, 0), WIDTH_MAX))
end

-- The member of a record in the set of `state`, and its score.
local function member(rec, state)
  if state == READY then
    return hex(rec.due) .. rec.seq .. rec.id, rec.pri
  elseif state == DEAD then
    return rec.seq .. rec.id, rec.updated or NOW
  end
  return rec.id, rec.due
end

-- The task id of a member of the set of `state`.
local function member_id(m, state)
  if state == READY then
    return string.sub(m, WIDTH + SEQ_WIDTH + 1)
  elseif state == DEAD then
    return string.sub(m, SEQ_WIDTH + 1)
  end
  return m
end

local function save(rec)
  redis.call('HSET', RECORDS, rec.id, header(rec) .. '\n' .. rec.body)
end

-- Limits as stored (`<max_active>,<ms between hand-outs>,<burst>,<max_active_per_key>`,
-- then `,g` when topic-wide): {max = max_active or nil, interval = ms between hand-outs or
-- nil, burst, per_key = max_active_per_key or nil, global = true or nil}.
local function parse_limits(spec)
  local max, interval, burst, per_key, g = string.match(spec, '^(%d*),([^,]*),(%d*),?(%d*),?(g?)$')
  return {
    max = tonumber(max),
    interval = tonumber(interval),
    burst = tonumber(burst) or 1,
    per_key = tonumber(per_key),
    global = g == 'g' or nil,
  }
end

-- The partition's flow limits (docs/flow-control.md), or nil. With one partition the counts
-- here are the topic's; with `global` they are the permits' (see the top). Read once a call.
local function limits()
  if LIM == nil then
    LIM = false
    local spec = redis.call('HGET', INFO, 'limits')
    if spec then
      LIM = parse_limits(spec)
    end
  end
  return LIM or nil
end

-- Whether the partition's limits are topic-wide (counted by the topic's permits).
local function global()
  local lim = limits()
  return lim ~= nil and lim.global == true
end

-- A keyed READY task's member in its key's order (KEYS[15]).
local function key_member(rec)
  local m, score = member(rec, READY)
  return rec.key .. ' ' .. string.format('%08x', score) .. m
end

-- The ZRANGEBYLEX bounds of `key`'s entries: a key holds no byte below '+', so '!' ends them.
local function key_range(key)
  return '[' .. key .. ' ', '(' .. key .. '!'
end

-- How many of `key`'s tasks may be handed out now (max_active_per_key less its ACTIVE
-- tasks; none while the topic's permits hold the key back), or nil when the topic has no
-- per-key limit.
local function key_room(key)
  local lim = limits()
  if not lim or not lim.per_key then
    return nil
  end
  if lim.global then
    local until_ms = redis.call('ZSCORE', BLOCKED, key)
    if until_ms and tonumber(until_ms) > NOW then
      return 0
    end
  end
  return math.max(0, lim.per_key - tonumber(redis.call('HGET', KACTIVE, key) or '0'))
end

-- Moves the entry `km` of `key`'s order into READY (`to_ready`) or HELD when it is in the
-- other (an entry in neither is being handed out by this pop: left alone).
local function key_move(key, km, to_ready)
  local rest = string.sub(km, #key + 2)
  local score, m = tonumber(string.sub(rest, 1, 8), 16), string.sub(rest, 9)
  local from, to = HELD, SETS[READY]
  if not to_ready then
    from, to = to, from
  end
  if redis.call('ZREM', from, m) == 1 then
    redis.call('ZADD', to, score, m)
    if to_ready then
      READY_N = READY_N + 1
      MOVED = MOVED + 1
    end
  end
end

-- Puts `n` entries of `key`'s order from the `first` (0-based) on the side of the window
-- they belong on: READY for the first `room` of the key, held for the rest.
local function window_part(key, room, first, n)
  local lo, hi = key_range(key)
  for i, km in ipairs(redis.call('ZRANGEBYLEX', KORDER, lo, hi, 'LIMIT', first, n)) do
    key_move(key, km, first + i - 1 < room)
  end
end

-- Restores `key`'s window (its first `key_room` tasks in READY, the rest held) after one
-- change that moved its edge by at most one place: a task of the key left its order, or
-- entered or left ACTIVE. Only the two entries at the edge can be on the wrong side.
local function settle(key)
  local room = key_room(key)
  if room ~= nil then
    window_part(key, room, math.max(room - 1, 0), 2)
  end
end

-- Restores `key`'s whole window after its room changed by any amount (a block by the topic's
-- permits begins or ends): READY holds at most max_active_per_key of a key, so only that
-- many entries can be on the wrong side.
local function rewindow(key)
  local room = key_room(key)
  if room ~= nil then
    window_part(key, room, 0, LIM.per_key)
  end
end

-- Puts a record whose state is READY into READY's indexes: a keyed one into its key's order,
-- and held when it falls outside its key's window (pushing the window's last one out when it
-- falls inside). Returns whether it went into READY.
local function ready_in(rec)
  local m, score = member(rec, READY)
  if rec.key then
    local km = key_member(rec)
    redis.call('ZADD', KORDER, 0, km)
    local room = key_room(rec.key)
    if room ~= nil then
      local lo, hi = key_range(rec.key)
      if redis.call('ZLEXCOUNT', KORDER, lo, '[' .. km) > room then
        redis.call('ZADD', HELD, score, m)
        return false
      end
      redis.call('ZADD', SETS[READY], score, m)
      local out = redis.call('ZRANGEBYLEX', KORDER, lo, hi, 'LIMIT', room, 1)
      if out[1] then
        key_move(rec.key, out[1], false)
      end
      return true
    end
  end
  redis.call('ZADD', SETS[READY], score, m)
  return true
end

-- Takes a record out of the indexes of its current state.
local function leave(rec)
  local m = member(rec, rec.state)
  redis.call('ZREM', SETS[rec.state], m)
  if rec.state == READY and rec.key then
    redis.call('ZREM', HELD, m)
    redis.call('ZREM', KORDER, key_member(rec))
    settle(rec.key)
  elseif rec.state == ACTIVE then
    FREED = FREED + 1
    if global() then
      FREED_R[#FREED_R + 1] = rec.receipt
    end
    redis.call('ZREM', DEADLINES, rec.id)
    if rec.key then
      if redis.call('HINCRBY', KACTIVE, rec.key, -1) <= 0 then
        redis.call('HDEL', KACTIVE, rec.key)
      end
      settle(rec.key)
    end
  elseif EXPIRY[rec.state] then
    redis.call('ZREM', EXPIRY[rec.state], rec.id)
  end
end

-- The `now` of the partition's latest tick (0 before the first).
local function ticked()
  if TICKED == nil then
    TICKED = tonumber(redis.call('HGET', INFO, 'ticked') or '0')
  end
  return TICKED
end

-- Where a window handed to a consumer starts (a ttr, a backoff): UPPER, or the latest
-- tick's `now` if that is later. A script's clock is read before the script is sent; a tick
-- that ran in between at a later `now` may have expired what this script now hands out
-- again, and a window counted from the older reading would end before it began: the next
-- tick would expire the new delivery at once.
local function since_tick()
  return math.max(UPPER, ticked())
end

-- Makes a record's fields ACTIVE with `receipt` until its ttr deadline.
local function mark_active(rec, receipt)
  rec.state = ACTIVE
  rec.updated = NOW
  rec.deadline = since_tick() + rec.ttr
  rec.receipt = receipt
end

-- Hands a record (out of its old indexes) out: ACTIVE with `receipt` until its ttr deadline.
local function activate(rec, receipt)
  mark_active(rec, receipt)
  redis.call('ZADD', SETS[ACTIVE], rec.due, rec.id)
  index_timer(DEADLINES, rec.deadline, rec.id)
  save(rec)
  if rec.key then
    redis.call('HINCRBY', KACTIVE, rec.key, 1)
    settle(rec.key)
  end
end

-- Removes a record and every index entry of it.
local function purge(rec)
  leave(rec)
  if rec.expires then
    redis.call('ZREM', EXPIRIES, rec.id)
  end
  redis.call('HDEL', RECORDS, rec.id)
  redis.call('HDEL', EXTRAS, rec.id)
end

-- Reads a record; nil when the task does not exist or its retention has passed (such a
-- record is purged here, exactly at `now`, whatever the promoter's lag).
local function load(id)
  local raw = redis.call('HGET', RECORDS, id)
  if not raw then
    return nil
  end
  local nl = string.find(raw, '\n', 1, true)
  local f = {}
  local i = 1
  local rec
  if string.byte(raw, 1) >= 97 then
    -- The short form, in one match (fields left out read as '', as empty ones do).
    f = {string.match(raw, SHORT_HEADER)}
    local c = tonumber(f[1], 36)
    local seq = NO_SEQ
    local seq36 = f[3] or ''
    if seq36 ~= '' then
      local counter, offset = string.match(seq36, '^([^.]*)%.?(.*)$')
      seq = string.format('%011x%05x', c + (n36(offset) or 0), tonumber(counter, 36))
    end
    local due = c + n36(f[2])
    local updated = n36(f[4])
    local deadline = n36(f[8])
    local expires, drop = nil, false
    if f[12] and f[12] ~= '' then
      local offset, bang = string.match(f[12], '^([^!]*)(!?)$')
      expires = c + n36(offset)
      drop = bang == '!'
    end
    rec = {
      id = id,
      state = string.byte(raw, 1) - 97,
      due = due,
      due0 = due,
      due36 = f[2],
      created = c,
      c36 = f[1],
      seq36 = seq36,
      updated = updated and c + updated,
      ttr = n36(f[5]) or DEFAULT_TTR,
      max = n36(f[6]) or DEFAULT_MAX,
      retries = n36(f[7]) or 0,
      deadline = deadline and c + deadline or 0,
      receipt = f[9] or '',
      pri = n36(f[10]) or DEFAULT_PRIORITY,
      seq = seq,
      trace = f[11] or '',
      expires = expires,
      drop = drop,
      key = (f[13] ~= nil and f[13] ~= '') and f[13] or nil,
      body = string.sub(raw, nl + 1),
    }
  else
    -- The decimal form of earlier versions.
    for field in string.gmatch(string.sub(raw, 1, nl - 1) .. ',', '([^,]*),') do
      f[i] = field
      i = i + 1
    end
    rec = {
      id = id,
      state = tonumber(f[1]),
      due = tonumber(f[2]),
      created = tonumber(f[3]),
      updated = tonumber(f[4]),
      ttr = tonumber(f[5]),
      max = tonumber(f[6]),
      retries = tonumber(f[7]) or 0,
      deadline = tonumber(f[8]) or 0,
      receipt = f[9] or '',
      pri = tonumber(f[10]) or DEFAULT_PRIORITY,
      seq = (f[11] ~= nil and f[11] ~= '') and f[11] or NO_SEQ,
      trace = '',
      body = string.sub(raw, nl + 1),
    }
  end
  if (rec.state == FINISHED or rec.state == CANCELLED) and rec.deadline <= NOW then
    purge(rec)
    return nil
  end
  return rec
end

-- Removes the FINISHED or CANCELLED (`state`) tasks `ids`, whose retention passed by their
-- entries in the retention set. Five commands for the batch, none a task, and no record
-- decoded: a record of the short form in `state` is gone (its retention entry is scored by
-- the deadline it holds, both written together); one of the older decimal form is judged by
-- `load`; anything else is a stale index entry.
local function drop_retained(state, ids)
  local raws = redis.call('HMGET', RECORDS, unpack(ids))
  local letter = 97 + state
  -- `unset`: the ids to take out of the state's set (the gone ones and the stale entries).
  local gone, unset = {}, {}
  for i, id in ipairs(ids) do
    local first = raws[i] and string.byte(raws[i], 1)
    if first == letter then
      gone[#gone + 1] = id
      unset[#unset + 1] = id
    elseif first and first < 97 then
      -- load() purges it (every index entry) when its retention passed; one in another
      -- state is a stale entry; one whose retention has not passed loses only this entry.
      local rec = load(id)
      if rec and rec.state ~= state then
        unset[#unset + 1] = id
      end
    else
      unset[#unset + 1] = id
    end
  end
  redis.call('ZREM', EXPIRY[state], unpack(ids))
  if #unset > 0 then
    redis.call('ZREM', SETS[state], unpack(unset))
  end
  if #gone > 0 then
    redis.call('HDEL', RECORDS, unpack(gone))
    redis.call('HDEL', EXTRAS, unpack(gone))
  end
end

-- The first `max` DELAYED tasks not due yet, by due, then insertion (peek-delayed and kick).
-- The set orders equal dues by id, so every task due at the last due read is read too (at
-- most TIES_READ more; past that, ties fall back to id order) before sorting.
local TIES_READ = 1000
local function delayed_first(max)
  local r = redis.call('ZRANGEBYSCORE', SETS[DELAYED], '(' .. fmt(NOW), '+inf', 'WITHSCORES', 'LIMIT', 0, max)
  local ids, seen = {}, {}
  for i = 1, #r, 2 do
    ids[#ids + 1] = r[i]
    seen[r[i]] = true
  end
  if #r > 0 then
    local last = r[#r]
    for _, id in ipairs(redis.call('ZRANGEBYSCORE', SETS[DELAYED], last, last, 'LIMIT', 0, TIES_READ)) do
      if not seen[id] then
        ids[#ids + 1] = id
        seen[id] = true
      end
    end
  end
  local recs = {}
  for _, id in ipairs(ids) do
    local rec = load(id)
    if rec and rec.state == DELAYED then
      recs[#recs + 1] = rec
    end
  end
  table.sort(recs, function(a, b)
    if a.due ~= b.due then
      return a.due < b.due
    elseif a.seq ~= b.seq then
      return a.seq < b.seq
    end
    return a.id < b.id
  end)
  while #recs > max do
    table.remove(recs)
  end
  return recs
end

local function load_extra(id)
  local raw = redis.call('HGET', EXTRAS, id)
  if not raw then
    return {backoff = '', error = '', history = ''}
  end
  local a = string.find(raw, '\0', 1, true)
  local b = string.find(raw, '\0', a + 1, true)
  return {
    backoff = string.sub(raw, 1, a - 1),
    error = string.sub(raw, a + 1, b - 1),
    history = string.sub(raw, b + 1),
  }
end

local function save_extra(id, x)
  redis.call('HSET', EXTRAS, id, x.backoff .. '\0' .. x.error .. '\0' .. x.history)
end

-- Puts a record (already out of its old indexes) into `state` with due `due`, and saves it.
-- ACTIVE is entered by pop itself, which also sets the receipt and the ttr deadline.
local function enter(rec, state, due)
  rec.state = state
  rec.due = due
  rec.updated = NOW
  if rec.expires then
    -- Only a task that may still be handed out can expire (an ACTIVE one is never cut short).
    if state == DELAYED or state == READY then
      index_timer(EXPIRIES, rec.expires, rec.id)
    else
      redis.call('ZREM', EXPIRIES, rec.id)
    end
  end
  local ready = false
  if state == DELAYED then
    index_timer(SETS[DELAYED], due, rec.id)
  elseif state == READY then
    ready = ready_in(rec)
  else
    local m, score = member(rec, state)
    redis.call('ZADD', SETS[state], score, m)
  end
  if state == FINISHED or state == CANCELLED then
    rec.deadline = NOW + RETENTION
    rec.receipt = ''
    index_timer(EXPIRY[state], rec.deadline, rec.id)
  else
    rec.deadline = 0
    rec.receipt = ''
  end
  save(rec)
  if ready then
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
local function push_history(x, started, outcome, err)
  local entry = string.format('{"started_at_ms":%d,"ended_at_ms":%d,"outcome":"%s"', started, NOW, outcome)
  if err then
    entry = entry .. ',"error":' .. cjson.encode(err)
  end
  entry = entry .. '}'
  local h = x.history
  if h ~= '' then
    local lines = 1
    for _ in string.gmatch(h, '\n') do
      lines = lines + 1
    end
    if lines >= HISTORY then
      h = string.sub(h, string.find(h, '\n', 1, true) + 1)
    end
    entry = h .. '\n' .. entry
  end
  x.history = entry
end

-- Whether the task may no longer be handed out: its expiry is at or before now.
local function is_expired(rec)
  return rec.expires ~= nil and rec.expires <= NOW
end

-- Events of traced tasks (a trace context in the record) for the instance to record as
-- spans: 4 values each, the kind ('fire'; 'dead': its last ttr ran out; 'expired'), the id,
-- the due, the trace context.
-- Untraced tasks add nothing to a reply.
local TRACED = {}
local function traced(kind, rec)
  if rec.trace ~= '' then
    TRACED[#TRACED + 1] = kind
    TRACED[#TRACED + 1] = rec.id
    TRACED[#TRACED + 1] = rec.due
    TRACED[#TRACED + 1] = rec.trace
  end
end

-- A task whose expiry passed before it was handed out: DEAD with the last error `expired`, or
-- deleted (on_expire drop). Counted in the partition's `expired`.
local function expire(rec)
  traced('expired', rec)
  EXPIRED_N = EXPIRED_N + 1
  redis.call('HINCRBY', INFO, 'expired', 1)
  if rec.drop then
    purge(rec)
    return
  end
  local x = load_extra(rec.id)
  x.error = cjson.encode(EXPIRED)
  save_extra(rec.id, x)
  leave(rec)
  DEAD_N = DEAD_N + 1
  enter(rec, DEAD, rec.due)
end

-- Applies up to `limit` expiries that are due; returns how many entries it looked at.
local function expire_due(limit)
  local due = redis.call('ZRANGEBYSCORE', EXPIRIES, '-inf', NOW, 'LIMIT', 0, limit)
  for _, id in ipairs(due) do
    local rec = load(id)
    if rec and (rec.state == DELAYED or rec.state == READY) and is_expired(rec) then
      expire(rec)
    else
      redis.call('ZREM', EXPIRIES, id)
    end
  end
  return #due
end

-- A failed attempt of an ACTIVE task (release or ttr expiry), exactly as
-- delayq_core::lifecycle::after_failure decides it. `delay` is the consumer's override or nil.
-- Returns the new state.
local function fail(rec, delay, outcome, err)
  local x = load_extra(rec.id)
  push_history(x, rec.updated or tonumber(rec.created), outcome, err)
  if err then
    x.error = cjson.encode(err)
  end
  save_extra(rec.id, x)
  leave(rec)
  if rec.max >= 0 and rec.retries >= rec.max then
    DEAD_N = DEAD_N + 1
    enter(rec, DEAD, rec.due)
    return DEAD
  end
  rec.retries = rec.retries + 1
  if is_expired(rec) then
    -- It came back after its expiry: it expires now instead of another delivery (a
    -- dropped task reports DEAD too: it will not come back either).
    rec.state = READY
    expire(rec)
    return DEAD
  end
  local wait = delay
  if wait == nil then
    wait = backoff_delay(x.backoff, rec.retries)
  end
  if wait <= 0 then
    -- An immediate redelivery keeps its original due, so it goes to the front.
    enter(rec, READY, rec.due)
    return READY
  end
  enter(rec, DELAYED, since_tick() + wait)
  return DELAYED
end

-- Appends what the instance records about a run's promotions to a reply payload: the number
-- of promoted tasks, their due times (the lateness metric), then the traced events.
local function append_events(out, dues)
  out[#out + 1] = #dues
  for _, d in ipairs(dues) do
    out[#out + 1] = d
  end
  for _, v in ipairs(TRACED) do
    out[#out + 1] = v
  end
  return out
end

-- Moves up to `limit` due DELAYED tasks to READY. Returns their due times.
local function promote(limit)
  local due = redis.call('ZRANGEBYSCORE', SETS[DELAYED], '-inf', NOW, 'WITHSCORES', 'LIMIT', 0, limit)
  SCANNED = #due / 2
  local dues = {}
  if #due == 0 then
    return dues
  end
  local ids = {}
  local add = {}
  local keyed = {}
  for i = 1, #due, 2 do
    local id, d = due[i], due[i + 1]
    ids[#ids + 1] = id
    local rec = load(id)
    if rec and is_expired(rec) then
      expire(rec)
    elseif rec then
      rec.state = READY
      rec.updated = NOW
      save(rec)
      traced('fire', rec)
      if rec.key then
        keyed[#keyed + 1] = rec
      else
        local m, score = member(rec, READY)
        add[#add + 1] = score
        add[#add + 1] = m
        READY_N = READY_N + 1
      end
      dues[#dues + 1] = tonumber(d)
    end
  end
  redis.call('ZREM', SETS[DELAYED], unpack(ids))
  if #add > 0 then
    redis.call('ZADD', SETS[READY], unpack(add))
  end
  for _, rec in ipairs(keyed) do
    if ready_in(rec) then
      READY_N = READY_N + 1
    end
  end
  return dues
end

-- The pause of the partition at NOW: nil when it hands out tasks, -1 when paused until
-- resumed, else the epoch ms at which the pause ends.
local function paused()
  local p = redis.call('HGET', INFO, 'pause')
  if not p then
    return nil
  end
  local until_ms = tonumber(p)
  if until_ms ~= -1 and until_ms <= NOW then
    return nil
  end
  return until_ms
end

-- The rate's theoretical arrival time kept in the hash `info`, at least `at`.
local function tat_at(info, at)
  return math.max(tonumber(redis.call('HGET', info, 'tat') or '0'), at)
end

-- How many hand-outs the rate of `lim` lets go at UPPER (the start of the windows a pop hands
-- out) with its bucket at `tat`, and when none: the instant the next one may. The GCRA of
-- delayq_core::flow::take: a hand-out fits while tat - now < burst x interval; each moves
-- tat one interval on.
local function rate_room(lim, tat)
  local room = math.floor((UPPER + lim.burst * lim.interval - tat) / lim.interval + 1e-9)
  if room > 0 then
    return room, nil
  end
  return 0, math.max(math.ceil(tat - (lim.burst - 1) * lim.interval), UPPER + 1)
end

-- How many of `want` hand-outs the limits `lim` allow at UPPER, with `pending` hand-outs not
-- yet in the ACTIVE set, and when none: the instant the rate lets the next one go (nil when
-- it is max_active that holds them; `rate_room`, `spend`).
local function allowance(want, lim, pending)
  if not lim then
    return want, nil
  end
  if lim.global then
    -- Only a grant of the topic's permits hands a task out (`flow_take`).
    return 0, nil
  end
  local n = want
  if lim.max then
    n = math.min(n, math.max(0, lim.max - redis.call('ZCARD', SETS[ACTIVE]) - pending))
  end
  if lim.interval and n > 0 then
    local room, next_at = rate_room(lim, tat_at(INFO, UPPER))
    if room == 0 then
      return 0, next_at
    end
    n = math.min(n, room)
  end
  return n, nil
end

-- Moves the rate of `lim` on by `n` hand-outs.
local function spend(lim, n)
  if lim and lim.interval and n > 0 then
    local tat = tat_at(INFO, UPPER) + n * lim.interval
    redis.call('HSET', INFO, 'tat', string.format('%.17g', tat))
  end
end

-- Unkeyed tasks that hand-outs made ACTIVE (their fields, as `activate` does) and whose
-- writes wait to go as one command per key (`write_active`): Redis spends more on a call than
-- on an entry. Nothing may read their records or the ACTIVE and deadline sets before.
local function new_batch()
  return {n = 0, records = {}, actives = {}, deadlines = {}}
end

local function batch_active(batch, rec)
  batch.n = batch.n + 1
  local r, a, d = batch.records, batch.actives, batch.deadlines
  r[#r + 1] = rec.id
  r[#r + 1] = header(rec) .. '\n' .. rec.body
  a[#a + 1] = rec.due
  a[#a + 1] = rec.id
  d[#d + 1] = rec.deadline
  d[#d + 1] = rec.id
  if batch.earliest == nil or rec.deadline < batch.earliest then
    batch.earliest = rec.deadline
  end
end

local function write_active(batch)
  if batch.n > 0 then
    redis.call('HSET', RECORDS, unpack(batch.records))
    redis.call('ZADD', SETS[ACTIVE], unpack(batch.actives))
    note_timer(DEADLINES, batch.earliest)
    redis.call('ZADD', DEADLINES, unpack(batch.deadlines))
  end
end

-- Takes READY's first `n` members out of it (to hand out): its first tasks in rule 11's
-- order. `n` must fit one ZREM (Lua's unpack is bounded: callers keep it to 1 000 or so).
local function take_ready(n)
  local members = redis.call('ZRANGE', SETS[READY], 0, n - 1)
  if #members > 0 then
    redis.call('ZREM', SETS[READY], unpack(members))
  end
  return members
end

-- Hands out up to `want` READY tasks in the order of rule 11, as far as the flow limits `lim`
-- let them go, appending 10 values per task to `out` (id, body, retries, receipt, due, ttr,
-- priority, insertion number, trace context as the record holds it: '' for none, key: ''
-- for none). Receipts
-- are `prefix` and 4 hex digits counting on from `first`. Unkeyed tasks that go ACTIVE wait
-- in `batch` for the caller's `write_active`. READY holds only what
-- max_active_per_key lets go (see the top), so its first tasks are the ones to take. Returns
-- how many were taken, how many receipts were used, and when the rate lets none go while
-- tasks wait: the instant it will. `members`, when given, are READY's members to hand out,
-- already taken out of it by the caller (`take_ready`, for a round of calls without limits:
-- consume.lua).
local function hand_out(want, auto, prefix, first, lim, out, batch, members)
  if not members then
    local max, next_at = allowance(want, lim, batch.n)
    if max == 0 then
      if next_at and redis.call('ZCARD', SETS[READY]) > 0 then
        return 0, 0, next_at
      end
      return 0, 0, nil
    end
    members = take_ready(max)
  end
  local taken = 0
  for i, m in ipairs(members) do
    local id = member_id(m, READY)
    local rec = load(id)
    if rec and is_expired(rec) then
      -- Past what expire_due's batch reached: never handed out either.
      expire(rec)
    elseif rec then
      if rec.expires then
        redis.call('ZREM', EXPIRIES, id)
      end
      if rec.key then
        redis.call('ZREM', KORDER, key_member(rec))
      end
      taken = taken + 1
      local receipt = prefix .. string.format('%04x', first + i)
      if auto then
        enter(rec, FINISHED, rec.due)
        if rec.key then
          settle(rec.key)
        end
      elseif rec.key then
        activate(rec, receipt)
      else
        mark_active(rec, receipt)
        batch_active(batch, rec)
      end
      out[#out + 1] = id
      out[#out + 1] = rec.body
      out[#out + 1] = rec.retries
      out[#out + 1] = receipt
      out[#out + 1] = rec.due
      out[#out + 1] = rec.ttr
      out[#out + 1] = rec.pri
      out[#out + 1] = rec.seq
      out[#out + 1] = rec.trace
      out[#out + 1] = rec.key or ''
    end
  end
  spend(lim, taken)
  return taken, #members, nil
end

-- How many tasks a script that promoted `promoted` and handed out `taken` tells other
-- consumers of (while not `paused`): only what it promoted and left behind, and held keyed
-- tasks that a hand-out or a finish let into READY.
local function ready_left(promoted, taken, paused)
  if paused ~= nil then
    return 0
  end
  return math.max(0, #promoted - taken) + MOVED
end

-- Converts a partition written by the previous version (bare ids in READY and DEAD, no
-- priority or insertion number in the records) to this version's members. Once per
-- partition; afterwards one HGET per script.
local function upgrade()
  if redis.call('HGET', INFO, 'v') == '2' then
    return
  end
  for _, state in ipairs({READY, DEAD}) do
    local old = redis.call('ZRANGE', SETS[state], 0, -1)
    for _, id in ipairs(old) do
      redis.call('ZREM', SETS[state], id)
      local rec = load(id)
      if rec and rec.state == state then
        local m, score = member(rec, state)
        redis.call('ZADD', SETS[state], score, m)
      end
    end
  end
  redis.call('HSET', INFO, 'v', '2')
end

-- Tells the other instances what happened; this instance handles its own events directly.
local function publish()
  -- Slots freed in a topic that was at its max_active: consumers held back by it may go on.
  -- (Below the limit nobody waits for a slot, so a finish announces nothing then.)
  if FREED > 0 and READY_N == 0 then
    local lim = limits()
    -- (Topic-wide limits: the permits announce their freed slots, `permit_release`.)
    if lim and lim.max and not lim.global and redis.call('ZCARD', SETS[ACTIVE]) + FREED >= lim.max then
      READY_N = math.min(redis.call('ZCARD', SETS[READY]), FREED)
    end
  end
  if READY_N > 0 then
    redis.call('PUBLISH', CHANNEL, 'r ' .. ORIGIN .. ' ' .. TOPIC .. ' ' .. READY_N)
  end
  if WAKE then
    redis.call('PUBLISH', CHANNEL, 'w ' .. ORIGIN .. ' ' .. TOPIC .. ' ' .. PARTITION .. ' ' .. fmt(WAKE))
  end
end

-- Every reply starts with: status, tasks made ready, earliest new timer (-1: none), tasks
-- that went DEAD, tasks that expired, the number of receipts whose permits to give back and
-- those receipts (`FREED_R`). Status: 0 ok, -1 not found, -2 wrong state (then the state),
-- -3 stale receipt, -4 fenced off (then the newer token), -5 a due at or after the task's
-- expiry (then the expiry), -6 a touch that needs its permit held longer first (then the
-- task's receipt, key and ttr).
local function reply(status, payload)
  publish()
  local out = {status, READY_N, WAKE or -1, DEAD_N, EXPIRED_N, #FREED_R}
  for _, r in ipairs(FREED_R) do
    out[#out + 1] = r
  end
  if payload then
    for _, v in ipairs(payload) do
      out[#out + 1] = v
    end
  end
  return out
end

-- A refusal changed nothing: its reply carries only the status and the value after it.
local function refuse(status, state)
  return {status, 0, -1, 0, 0, 0, state or 0}
end


-- Loads the ACTIVE task `id` for its holder (`receipt`: '' for none). Returns the record, or
-- nil and the refusal to return (not found, wrong state, stale receipt).
local function load_held(id, receipt)
  local rec = load(id)
  if not rec then
    return nil, refuse(-1)
  end
  if rec.state ~= ACTIVE then
    return nil, refuse(-2, rec.state)
  end
  if receipt ~= '' and receipt ~= rec.receipt then
    return nil, refuse(-3)
  end
  return rec
end

-- Finishes the held tasks `held` (a list of {id, receipt: '' for none} or false: nothing to
-- finish), ACTIVE -> FINISHED, one after the other; the unkeyed ones' writes are gathered
-- into one command per key (a keyed one's count and window change at once, as `leave` does).
-- Returns the refusal of each that was refused, by index.
local function finish_all(held)
  local refusals, done = {}, {}
  local gone, expiring, finished, retained, records = {}, {}, {}, {}, {}
  local until_ms = NOW + RETENTION
  for i, h in ipairs(held) do
    if h then
      local rec, refusal = nil, nil
      if done[h[1]] then
        refusal = refuse(-2, FINISHED)
      else
        rec, refusal = load_held(h[1], h[2])
      end
      if refusal then
        refusals[i] = refusal
      elseif rec.key then
        leave(rec)
        enter(rec, FINISHED, rec.due)
      else
        done[rec.id] = true
        FREED = FREED + 1
        if global() then
          FREED_R[#FREED_R + 1] = rec.receipt
        end
        gone[#gone + 1] = rec.id
        if rec.expires then
          expiring[#expiring + 1] = rec.id
        end
        rec.state, rec.updated, rec.deadline, rec.receipt = FINISHED, NOW, until_ms, ''
        finished[#finished + 1] = rec.due
        finished[#finished + 1] = rec.id
        retained[#retained + 1] = until_ms
        retained[#retained + 1] = rec.id
        records[#records + 1] = rec.id
        records[#records + 1] = header(rec) .. '\n' .. rec.body
      end
    end
  end
  if #gone > 0 then
    redis.call('ZREM', SETS[ACTIVE], unpack(gone))
    redis.call('ZREM', DEADLINES, unpack(gone))
    if #expiring > 0 then
      redis.call('ZREM', EXPIRIES, unpack(expiring))
    end
    redis.call('ZADD', SETS[FINISHED], unpack(finished))
    note_timer(EXPIRY[FINISHED], until_ms)
    redis.call('ZADD', EXPIRY[FINISHED], unpack(retained))
    redis.call('HSET', RECORDS, unpack(records))
  end
  return refusals
end

-- Sets NOW and UPPER from a script's first argument (defined below `begin`, so that the test
-- of `begin` sees it).
local read_now

-- A call's start (see the top): `keys` and `argv` are its KEYS and ARGV. A local that a script
-- changes must be reset here (the test `every_changed_local_is_reset` in mod.rs checks it).
local function begin(keys, argv)
  read_now(argv[1])
  CHANNEL, ORIGIN, TOPIC, PARTITION, RETENTION = argv[2], argv[3], argv[4], argv[5], tonumber(argv[6])
  SETS = {[0] = keys[1], keys[2], keys[3], keys[4], keys[5], keys[6]}
  DEADLINES = keys[7]
  EXPIRY = {[FINISHED] = keys[8], [CANCELLED] = keys[9]}
  RECORDS, EXTRAS, INFO, EXPIRIES = keys[10], keys[11], keys[12], keys[13]
  HELD, KORDER, KACTIVE, BLOCKED = keys[14], keys[15], keys[16], keys[17]
  READY_N, WAKE, DEAD_N, EXPIRED_N, SCANNED = 0, nil, 0, 0, 0
  HEADS, TRACED, FREED, MOVED, LIM, FREED_R = {}, {}, 0, 0, nil, {}
  TICKED = nil
  upgrade()
end

-- The clock's bounds from a script's first argument: `lower` or `lower:upper`.
read_now = function(arg)
  local lower, upper = string.match(arg, '^(%d+):(%d+)$')
  if lower then
    NOW, UPPER = tonumber(lower), tonumber(upper)
  else
    NOW = tonumber(arg)
    UPPER = NOW
  end
end

-- The topic's permits: the counts of the limits of a topic of several partitions, in a slot
-- of their own (see "Topic-wide limits" at the top).
-- KEYS:
--   1 the permits: a sorted set, receipt -> until when it holds a slot (epoch ms; the ttr
--     deadline of the task that holds it once settled)
--   2 the keys of keyed permits: a hash, receipt -> key
--   3 permits per key: a hash, key -> how many
--   4 the limits: a hash with `limits` (as a partition's, without `,g`) and `tat` (the rate)
--   5 keys the permits refused, by key: a hash, key -> the partitions holding it back
--     (comma-separated), told when the key has a free permit again
-- ARGV: 1 now (as a partition script's), 2 the events channel, 3 the calling instance,
--   4 the topic, 5.. the function's own.
local function begin_permits(keys, argv)
  read_now(argv[1])
  CHANNEL, ORIGIN, TOPIC = argv[2], argv[3], argv[4]
  P_PERMITS, P_KEYS, P_KACTIVE, P_INFO, P_BLOCKS = keys[1], keys[2], keys[3], keys[4], keys[5]
  P_FREED, P_UNBLOCK, LIM = 0, {}, nil
end

-- The topic's limits as its permits keep them, or nil.
local function permit_limits()
  if LIM == nil then
    local spec = redis.call('HGET', P_INFO, 'limits')
    LIM = spec and parse_limits(spec) or false
  end
  return LIM or nil
end

-- Gives back the permit `r`, if it still holds a slot; a key it frees from full lifts the
-- holds of the partitions that refused it (`P_UNBLOCK`).
local function permit_free(r)
  if redis.call('ZREM', P_PERMITS, r) == 0 then
    return
  end
  P_FREED = P_FREED + 1
  local key = redis.call('HGET', P_KEYS, r)
  if key then
    redis.call('HDEL', P_KEYS, r)
    if redis.call('HINCRBY', P_KACTIVE, key, -1) <= 0 then
      redis.call('HDEL', P_KACTIVE, key)
    end
    local parts = redis.call('HGET', P_BLOCKS, key)
    if parts then
      redis.call('HDEL', P_BLOCKS, key)
      P_UNBLOCK[#P_UNBLOCK + 1] = {key, parts}
    end
  end
end

-- Frees the permits whose time passed (their task's ttr ran out, or a grant was never used).
local function permit_expire()
  while true do
    local gone = redis.call('ZRANGEBYSCORE', P_PERMITS, '-inf', NOW, 'LIMIT', 0, 1000)
    for _, r in ipairs(gone) do
      permit_free(r)
    end
    if #gone < 1000 then
      return
    end
  end
end

-- A new permit `r` for a task of `key` ('' none) until `until_ms`.
local function permit_take(r, key, until_ms)
  redis.call('ZADD', P_PERMITS, until_ms, r)
  if key ~= '' then
    redis.call('HSET', P_KEYS, r, key)
    redis.call('HINCRBY', P_KACTIVE, key, 1)
  end
end

-- Whether the topic's limits `lim` leave room for one more ACTIVE task of `key` now.
local function permit_room(lim, key)
  if lim.max and redis.call('ZCARD', P_PERMITS) >= lim.max then
    return false
  end
  if key ~= '' and lim.per_key then
    return tonumber(redis.call('HGET', P_KACTIVE, key) or '0') < lim.per_key
  end
  return true
end

-- Announces slots freed in a topic that was at its max_active, as a partition's `publish`.
local function permit_publish(was_full)
  if was_full and P_FREED > 0 then
    redis.call('PUBLISH', CHANNEL, 'r ' .. ORIGIN .. ' ' .. TOPIC .. ' ' .. P_FREED)
  end
end

-- The reply of a function that may free permits: how many it freed, whether the topic was at
-- its max_active before, the keys whose holds to lift (key and its partitions each), then
-- the function's own values.
local function permit_reply(was_full, payload)
  permit_publish(was_full)
  local out = {P_FREED, was_full and 1 or 0, #P_UNBLOCK}
  for _, u in ipairs(P_UNBLOCK) do
    out[#out + 1] = u[1]
    out[#out + 1] = u[2]
  end
  for _, v in ipairs(payload or {}) do
    out[#out + 1] = v
  end
  return out
end

-- Whether the topic is at its max_active (after the permits whose time passed are freed).
local function permit_full(lim)
  return lim ~= nil and lim.max ~= nil and redis.call('ZCARD', P_PERMITS) >= lim.max
end
