-- finish: ACTIVE -> FINISHED. ARGV[9] the task id, ARGV[10] the receipt ('' for none).
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
leave(rec)
enter(rec, FINISHED, rec.due)
return reply(0)
