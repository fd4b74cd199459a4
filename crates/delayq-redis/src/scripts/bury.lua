-- bury: ACTIVE -> DEAD (rule 13), the attempt ending with the outcome "buried".
-- ARGV[7] the task id, ARGV[8] the receipt ('' for none), ARGV[9] '1' when an error text is
-- given, ARGV[10] the error text (the last error; default "buried"), ARGV[11] a new
-- priority ('' to keep it).
local rec, refusal = load_held(ARGV[7], ARGV[8])
if not rec then
  return refusal
end
local err = 'buried'
if ARGV[9] == '1' then
  err = ARGV[10]
end
local x = load_extra(rec.id)
push_history(x, rec.updated or tonumber(rec.created), 'buried', err)
x.error = cjson.encode(err)
save_extra(rec.id, x)
if ARGV[11] ~= '' then
  rec.pri = tonumber(ARGV[11])
end
leave(rec)
DEAD_N = DEAD_N + 1
enter(rec, DEAD, rec.due)
return reply(0)
