-- take: one task by id, READY, DELAYED or DEAD → ACTIVE (beanstalkd's reserve-job), whatever
-- its place in the order and whether the partition is paused (beanstalkd hands a named job
-- out of a paused tube too). A DELAYED task is taken as if kicked first (due now), a DEAD one
-- as if requeued first (retries reset).
-- ARGV[7] the task id, ARGV[8] a random receipt prefix (12 hex digits).
-- Reply payload: body, retries, receipt, due, ttr, priority, trace context, the ttr deadline,
-- the key ('' none), and 1 when the partition's limits are topic-wide (the task's permit is
-- then the caller's to hold, `permit_hold`: a reserve-job is an operator's act, which limits
-- do not refuse).
local rec = load(ARGV[7])
if not rec then
  return refuse(-1)
end
if rec.state ~= READY and rec.state ~= DELAYED and rec.state ~= DEAD then
  return refuse(-2, rec.state)
end
if rec.state ~= DEAD and is_expired(rec) then
  -- Too late to hand it out: it expires now, and the caller learns what became of it.
  expire(rec)
  if rec.drop then
    return reply(-1, {0})
  end
  return reply(-2, {DEAD})
end
local from = rec.state
leave(rec)
if from == DELAYED then
  rec.due = NOW
elseif from == DEAD then
  rec.retries = 0
  -- An operator's explicit act, as requeue: the task is wanted, whatever its expiry said.
  rec.expires = nil
  rec.drop = false
end
if rec.expires then
  redis.call('ZREM', EXPIRIES, rec.id)
end
local receipt = ARGV[8] .. '0001'
activate(rec, receipt)
return reply(0, {rec.body, rec.retries, receipt, rec.due, rec.ttr, rec.pri, rec.trace, rec.deadline, rec.key or '', global() and 1 or 0})
