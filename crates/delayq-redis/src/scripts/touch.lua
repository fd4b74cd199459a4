-- touch: ACTIVE, restarts the ttr. ARGV[7] the task id, ARGV[8] the receipt ('' for none).
-- Reply payload: the new ttr deadline. A later deadline never needs a wake-up.
local rec, refusal = load_held(ARGV[7], ARGV[8])
if not rec then
  return refusal
end
rec.deadline = UPPER + rec.ttr
save(rec)
redis.call('ZADD', DEADLINES, rec.deadline, rec.id)
return reply(0, {rec.deadline})
