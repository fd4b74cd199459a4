-- finish: ACTIVE -> FINISHED. ARGV[7] the task id, ARGV[8] the receipt ('' for none).
local rec, refusal = load_held(ARGV[7], ARGV[8])
if not rec then
  return refusal
end
leave(rec)
enter(rec, FINISHED, rec.due)
return reply(0)
