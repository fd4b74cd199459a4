-- kick: back to READY, beanstalkd's kick and kick-job.
-- ARGV[7] a task id (DEAD or DELAYED), or '' for a batch: then ARGV[8] '5' for up to
-- ARGV[9] DEAD tasks, oldest buried first, retries reset (as requeue), or '0' for up to
-- ARGV[9] DELAYED tasks not due yet, earliest due first, then insertion.
-- A DEAD task keeps its due and loses its expiry (as requeue), a DELAYED one is due now.
-- Reply payload: how many moved.
local function kick(rec)
  local from = rec.state
  leave(rec)
  if from == DEAD then
    rec.retries = 0
    rec.expires = nil
    rec.drop = false
    enter(rec, READY, rec.due)
  else
    enter(rec, READY, NOW)
  end
end
if ARGV[7] ~= '' then
  local rec = load(ARGV[7])
  if not rec then
    return refuse(-1)
  end
  if rec.state ~= DEAD and rec.state ~= DELAYED then
    return refuse(-2, rec.state)
  end
  kick(rec)
  return reply(0, {1})
end
local max = tonumber(ARGV[9])
local n = 0
if ARGV[8] == '5' then
  local dead = redis.call('ZRANGE', SETS[DEAD], 0, max - 1)
  for _, m in ipairs(dead) do
    local rec = load(member_id(m, DEAD))
    if rec and rec.state == DEAD then
      kick(rec)
      n = n + 1
    else
      redis.call('ZREM', SETS[DEAD], m)
    end
  end
else
  for _, rec in ipairs(delayed_first(max)) do
    kick(rec)
    n = n + 1
  end
end
return reply(0, {n})
