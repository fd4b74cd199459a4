-- pop: takes up to ARGV[7] READY tasks in the order of rule 11 (priority, due, insertion),
-- after promoting what is due (so a partition whose promoter lags, or has none, still never
-- keeps due tasks back) and applying the expiries that are due (so a task is never handed
-- out at or after its expiry, whatever the promoter's lag). A paused partition promotes and
-- expires but hands nothing out (rule 14). A topic's flow limits (`allowance`) bound how many
-- go; when its rate lets none go, the reply gives the instant it will as the pause's end, so
-- the instance wakes its parked consumers then.
-- ARGV[8] '1' to finish them at once, ARGV[9] a random receipt prefix (12 hex digits),
-- ARGV[10] how many due tasks to promote at most. consume.lua does the same for several
-- consumers' calls of one partition at once; this one serves pops planned across partitions.
-- Reply payload: the number of tasks taken, the pause (-2: none, -1: until resumed, else its
-- end), 10 values per task (`hand_out`), then what this pop promoted (`append_events`).
local max = tonumber(ARGV[7])
local auto = ARGV[8] == '1'
local prefix = ARGV[9]
local promoted = promote(tonumber(ARGV[10]))
expire_due(tonumber(ARGV[10]))
local pause = paused()
local out = {0, pause or -2}
local taken = 0
if pause == nil then
  local batch = new_batch()
  local _
  taken, _, pause = hand_out(max, auto, prefix, 0, limits(), out, batch)
  write_active(batch)
  out[2] = pause or -2
end
out[1] = taken
READY_N = ready_left(promoted, taken, pause)
return reply(0, append_events(out, promoted))
