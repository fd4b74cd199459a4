-- bury: ACTIVE -> DEAD (rule 13), the attempt ending with the outcome "buried".
-- ARGV[7] the task id, ARGV[8] the receipt ('' for none), ARGV[9] '1' when an error text is
-- given, ARGV[10] the error text (the last error; default "buried"), ARGV[11] a new
-- priority ('' to keep it).
local rec = load(ARGV[7])
if not rec then
  return refuse(-1)
end
if rec.state ~= ACTIVE then
  return refuse(-2, rec.state)
end
if ARGV[8] ~= '' and ARGV[8] ~= rec.receipt then
  return refuse(-3)
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
