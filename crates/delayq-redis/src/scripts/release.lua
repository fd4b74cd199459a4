-- release: a failed attempt, ACTIVE -> READY, DELAYED or DEAD. ARGV[9] the task id,
-- ARGV[10] the receipt ('' for none), ARGV[11] the delay override ('' for none),
-- ARGV[12] '1' when an error text is given, ARGV[13] the error text.
-- Reply payload: the new state.
local rec = load(ARGV[9])
if not rec then
  return refuse(-1)
end
if rec.state ~= ACTIVE then
  return refuse(-2, rec.state)
end
if ARGV[10] ~= '' and ARGV[10] ~= rec.receipt then
  return refuse(-3)
end
local delay = nil
if ARGV[11] ~= '' then
  delay = tonumber(ARGV[11])
end
local err = nil
if ARGV[12] == '1' then
  err = ARGV[13]
end
local state = fail(rec, delay, 'released', err)
return reply(0, {state})
