-- add: adds tasks of one partition, in order, with a few commands for the whole batch.
-- ARGV[7] the number of tasks, then 9 values per task: id, due, the packed record (built by
-- the caller with the same `now`: READY when due <= now, else DELAYED), the backoff JSON
-- ('' for none), on_duplicate (0 reject, 1 replace, 2 keep), the priority, the insertion
-- number (16 hex digits, as in the record; rule 11: FIFO among equals), the expiry ('' for
-- none; the record holds it too), the flow-control key ('' for none; the record holds it
-- too: a keyed READY task goes through `ready_in`, into its key's order).
-- Reply payload: one code per task: 0 added, 1 replaced, 2 existed (kept), 3 duplicate.
local n = tonumber(ARGV[7])
local ids = {}
for i = 0, n - 1 do
  ids[i + 1] = ARGV[8 + i * 9]
end
local existing = redis.call('HMGET', RECORDS, unpack(ids))
-- The ARGV offset of the task that will be written, by id (a later task of the batch with
-- the same id sees the earlier one here).
local pending = {}
local order = {}
local out = {}
for i = 0, n - 1 do
  local a = 8 + i * 9
  local id = ARGV[a]
  local policy = ARGV[a + 4]
  local code = 0
  if pending[id] then
    if policy == '2' then
      code = 2
    elseif policy == '1' then
      code = 1
    else
      code = 3
    end
  elseif existing[i + 1] then
    local old = load(id)
    if old == nil then
      code = 0 -- its retention had passed: it is gone
    elseif policy == '2' then
      code = 2
    elseif policy == '1' then
      -- The old schedule, history and receipt are gone with the old record.
      purge(old)
      code = 1
    else
      code = 3
    end
  end
  if code <= 1 then
    if not pending[id] then
      order[#order + 1] = id
    end
    pending[id] = a
  end
  out[i + 1] = code
end
if #order > 0 then
  local records = {}
  local extras = {}
  local delayed = {}
  local ready = {}
  local earliest = nil
  for _, id in ipairs(order) do
    local a = pending[id]
    local due = tonumber(ARGV[a + 1])
    records[#records + 1] = id
    records[#records + 1] = ARGV[a + 2]
    if ARGV[a + 7] ~= '' then
      index_timer(EXPIRIES, tonumber(ARGV[a + 7]), id)
    end
    if ARGV[a + 3] ~= '' then
      extras[#extras + 1] = id
      extras[#extras + 1] = ARGV[a + 3] .. '\0\0'
    end
    if due <= NOW and ARGV[a + 8] ~= '' then
      local rec = {id = id, due = due, seq = ARGV[a + 6], pri = tonumber(ARGV[a + 5]), key = ARGV[a + 8]}
      if ready_in(rec) then
        READY_N = READY_N + 1
      end
    elseif due <= NOW then
      ready[#ready + 1] = tonumber(ARGV[a + 5])
      ready[#ready + 1] = hex(due) .. ARGV[a + 6] .. id
    else
      delayed[#delayed + 1] = due
      delayed[#delayed + 1] = id
      if earliest == nil or due < earliest then
        earliest = due
      end
    end
  end
  redis.call('HSET', RECORDS, unpack(records))
  if #extras > 0 then
    redis.call('HSET', EXTRAS, unpack(extras))
  end
  if earliest then
    local head = head_score(SETS[DELAYED])
    if (head == nil or earliest < head) and (WAKE == nil or earliest < WAKE) then
      WAKE = earliest
    end
    redis.call('ZADD', SETS[DELAYED], unpack(delayed))
  end
  if #ready > 0 then
    redis.call('ZADD', SETS[READY], unpack(ready))
    READY_N = READY_N + #ready / 2
  end
end
return reply(0, out)
