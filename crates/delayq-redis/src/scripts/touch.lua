-- touch: ACTIVE, restarts the ttr. ARGV[7] the task id, ARGV[8] the receipt ('' for none),
-- ARGV[9] until when the task's permit holds (topic-wide limits; '' when the caller did not
-- hold one). Reply payload: the new ttr deadline. A later deadline never needs a wake-up.
-- With topic-wide limits a deadline beyond the permit is refused with -6, the task's
-- receipt, key and ttr: the caller holds the permit longer (`permit_hold`) and asks again.
local rec, refusal = load_held(ARGV[7], ARGV[8])
if not rec then
  return refusal
end
if global() and (ARGV[9] == '' or UPPER + rec.ttr > tonumber(ARGV[9])) then
  return reply(-6, {rec.receipt, rec.key or '', rec.ttr})
end
rec.deadline = UPPER + rec.ttr
save(rec)
redis.call('ZADD', DEADLINES, rec.deadline, rec.id)
return reply(0, {rec.deadline})
