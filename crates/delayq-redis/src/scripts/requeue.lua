-- requeue: DEAD -> READY with retries reset, its due kept, its expiry cleared (an operator's
-- explicit act: the task is wanted now).
-- ARGV[7] a task id, or '' for every DEAD task of the partition, at most ARGV[8] of them.
-- Reply payload: how many were requeued.
local function requeue(rec)
  leave(rec)
  rec.retries = 0
  rec.expires = nil
  rec.drop = false
  enter(rec, READY, rec.due)
end
if ARGV[7] ~= '' then
  local rec = load(ARGV[7])
  if not rec then
    return refuse(-1)
  end
  if rec.state ~= DEAD then
    return refuse(-2, rec.state)
  end
  requeue(rec)
  return reply(0, {1})
end
local dead = redis.call('ZRANGE', SETS[DEAD], 0, tonumber(ARGV[8]) - 1)
local n = 0
for _, m in ipairs(dead) do
  local rec = load(member_id(m, DEAD))
  if rec and rec.state == DEAD then
    requeue(rec)
    n = n + 1
  else
    redis.call('ZREM', SETS[DEAD], m)
  end
end
return reply(0, {n, #dead})
