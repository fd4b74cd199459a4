-- requeue: DEAD -> READY with retries reset, its due kept.
-- ARGV[9] a task id, or '' for every DEAD task of the partition, at most ARGV[10] of them.
-- Reply payload: how many were requeued.
local function requeue(id, due)
  redis.call('ZREM', SETS[DEAD], id)
  redis.call('HDEL', tkey(id), 'r')
  enter(id, READY, due)
end
if ARGV[9] ~= '' then
  local rec = load(ARGV[9])
  if not rec then
    return refuse(-1)
  end
  if rec.state ~= DEAD then
    return refuse(-2, rec.state)
  end
  requeue(rec.id, rec.due)
  return reply(0, {1})
end
local dead = redis.call('ZRANGE', SETS[DEAD], 0, tonumber(ARGV[10]) - 1, 'WITHSCORES')
for i = 1, #dead, 2 do
  requeue(dead[i], tonumber(dead[i + 1]))
end
return reply(0, {#dead / 2})
