-- release: a failed attempt, ACTIVE -> READY, DELAYED or DEAD. ARGV[7] the task id,
-- ARGV[8] the receipt ('' for none), ARGV[9] the delay override ('' for none),
-- ARGV[10] '1' when an error text is given, ARGV[11] the error text, ARGV[12] a new
-- priority ('' to keep it).
-- Reply payload: the new state.
local rec, refusal = load_held(ARGV[7], ARGV[8])
if not rec then
  return refusal
end
local delay = nil
if ARGV[9] ~= '' then
  delay = tonumber(ARGV[9])
end
local err = nil
if ARGV[10] == '1' then
  err = ARGV[11]
end
if ARGV[12] ~= '' then
  rec.pri = tonumber(ARGV[12])
end
local state = fail(rec, delay, 'released', err)
return reply(0, {state})
