-- finish_pop: a consumer's "ack and take the next" in one script, when the task it held and
-- the topic it pops are in one partition: finish.lua (ARGV[7] the held task's id, ARGV[8]
-- its receipt), then, only when the finish was done, pop.lua with its arguments from
-- ARGV[9] on. A refused finish is the reply and nothing is popped.
local held, refusal = load_held(ARGV[7], ARGV[8])
if not held then
  return refusal
end
leave(held)
enter(held, FINISHED, held.due)
POP_ARG = 9
