-- reschedule: DELAYED or READY -> a new due (rule 15): READY when it has passed, else
-- DELAYED; body, id, retries, priority and insertion number stay.
-- A due at or after the task's expiry is refused (-5, then the expiry).
-- ARGV[7] the task id, ARGV[8] the new due. Reply payload: the new state.
local rec = load(ARGV[7])
if not rec then
  return refuse(-1)
end
if rec.state ~= DELAYED and rec.state ~= READY then
  return refuse(-2, rec.state)
end
local due = tonumber(ARGV[8])
if rec.expires and due >= rec.expires then
  return refuse(-5, rec.expires)
end
leave(rec)
local state = DELAYED
if due <= NOW then
  state = READY
end
enter(rec, state, due)
return reply(0, {state})
