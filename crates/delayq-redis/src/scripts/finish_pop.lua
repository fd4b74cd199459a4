-- finish_pop: a consumer's "ack and take the next" in one script, when the task it held and
-- the topic it pops are in one partition: the finish of finish.lua (ARGV[7] the held task's
-- id, ARGV[8] its receipt), then, only when it was done, pop.lua with its arguments from
-- ARGV[9] on. A refused finish is the reply and nothing is popped.
local refusal = finish_held(ARGV[7], ARGV[8])
if refusal then
  return refusal
end
POP_ARG = 9
