-- finish: ACTIVE -> FINISHED. ARGV[7] the task id, ARGV[8] the receipt ('' for none).
local refusal = finish_held(ARGV[7], ARGV[8])
if refusal then
  return refusal
end
return reply(0)
