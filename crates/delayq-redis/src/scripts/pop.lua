-- pop: takes up to ARGV[9] READY tasks, earliest due first, after promoting what is due
-- (so a partition whose promoter lags, or has none, still never keeps due tasks back).
-- ARGV[10] '1' to finish them at once, ARGV[11] a random receipt prefix (12 hex digits),
-- ARGV[12] how many due tasks to promote at most.
-- Reply payload: the number of tasks taken, 6 values per task (id, body, retries, receipt,
-- due, ttr), then the due times of the tasks this pop promoted (for the lateness metric).
local max = tonumber(ARGV[9])
local auto = ARGV[10] == '1'
local prefix = ARGV[11]
local promoted = promote(tonumber(ARGV[12]))
local ids = redis.call('ZRANGE', SETS[READY], 0, max - 1)
local out = {#ids}
if #ids > 0 then
  redis.call('ZREM', SETS[READY], unpack(ids))
end
for i, id in ipairs(ids) do
  local key = tkey(id)
  local v = redis.call('HMGET', key, 'b', 'r', 'd', 't')
  local due = tonumber(v[3])
  local receipt = prefix .. string.format('%04x', i)
  if auto then
    enter(id, FINISHED, due)
  else
    local deadline = NOW + tonumber(v[4])
    redis.call('ZADD', SETS[ACTIVE], due, id)
    redis.call('HSET', key, 's', ACTIVE, 'u', NOW, 'x', deadline, 'p', receipt)
    index_timer(DEADLINES, deadline, id)
  end
  out[#out + 1] = id
  out[#out + 1] = v[1]
  out[#out + 1] = v[2] or '0'
  out[#out + 1] = receipt
  out[#out + 1] = v[3]
  out[#out + 1] = v[4]
end
-- Wake other consumers only for what this pop promoted and left behind.
READY_N = math.max(0, #promoted - #ids)
for _, d in ipairs(promoted) do
  out[#out + 1] = d
end
return reply(0, out)
