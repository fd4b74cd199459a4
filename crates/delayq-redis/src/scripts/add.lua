-- add: adds tasks of one partition, in order.
-- ARGV[9] the number of tasks, then 8 values per task: id, body, due, created, ttr,
-- max retries, backoff JSON ('' for none), on_duplicate (0 reject, 1 replace, 2 keep).
-- Reply payload: one code per task: 0 added, 1 replaced, 2 existed (kept), 3 duplicate.
local n = tonumber(ARGV[9])
local out = {}
for i = 0, n - 1 do
  local a = 10 + i * 8
  local id = ARGV[a]
  local due = tonumber(ARGV[a + 2])
  local policy = ARGV[a + 7]
  local code = 0
  local old = load(id)
  if old then
    if policy == '2' then
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
    local key = tkey(id)
    local state = DELAYED
    if due <= NOW then
      state = READY
    end
    redis.call('HSET', key, 'b', ARGV[a + 1], 's', state, 'd', due, 'c', ARGV[a + 3],
      't', ARGV[a + 4], 'm', ARGV[a + 5])
    if ARGV[a + 6] ~= '' then
      redis.call('HSET', key, 'k', ARGV[a + 6])
    end
    if state == DELAYED then
      index_timer(SETS[DELAYED], due, id)
    else
      redis.call('ZADD', SETS[READY], due, id)
      READY_N = READY_N + 1
    end
  end
  out[i + 1] = code
end
return reply(0, out)
