-- consume: the calls of several consumers of one partition in one script: each a finish
-- (ACTIVE -> FINISHED, `finish_all`), a pop (as pop.lua), or both (ack and take the next:
-- the pop only when the finish was done). The instance gathers the calls that wait for the
-- partition while a script of it runs (src/storage/consume.rs), so a busy partition costs
-- Redis one script per round instead of one per call. What is due is promoted and what
-- expired is applied once, first; then the round's finishes, in the order the calls came;
-- then its pops, in that order, each bounded by the flow limits in turn as pops one after
-- the other would be. (Finishing first is one order the concurrent calls could have come in;
-- it lets the finishes' writes go together, `finish_all`, and the pops' at the end,
-- `write_active`.)
-- ARGV[7] a random receipt prefix (12 hex digits), ARGV[8] how many due tasks to promote at
-- most, ARGV[9] the number of calls, then 4 values per call: the held task's id ('' for no
-- finish), its receipt ('' for none), how many tasks to pop (0 for none), '1' to finish them
-- at once.
-- Reply payload: the pause (-2: none, -1: until resumed, else its end, or the instant the
-- rate lets the next task go), the number of calls, per call: the finish's status (0 done or
-- not asked, else the refusal's as `reply`) and state (the task's, for -2), the number of
-- tasks taken, 10 values per task (`hand_out`); then what this script promoted
-- (`append_events`).
local prefix = ARGV[7]
local promoted = promote(tonumber(ARGV[8]))
expire_due(tonumber(ARGV[8]))
local pause = paused()
local lim = limits()
local calls = tonumber(ARGV[9])
local held = {}
for c = 0, calls - 1 do
  local a = 10 + 4 * c
  held[c + 1] = ARGV[a] ~= '' and {ARGV[a], ARGV[a + 1]}
end
local refused = finish_all(held)
local out = {pause or -2, calls}
local batch = new_batch()
local taken, used = 0, 0
-- Without limits, each call takes READY's next members: one ZRANGE and ZREM for them all
-- (up to TAKE_MAX; a larger round takes them a call at a time).
local TAKE_MAX = 1000
local ahead, at = nil, 1
if lim == nil and pause == nil then
  local total = 0
  for c = 0, calls - 1 do
    local a = 10 + 4 * c
    if not refused[c + 1] then
      total = total + tonumber(ARGV[a + 2])
    end
  end
  if total > 0 and total <= TAKE_MAX then
    ahead = take_ready(total)
  end
end
for c = 0, calls - 1 do
  local a = 10 + 4 * c
  local refusal, max = refused[c + 1], tonumber(ARGV[a + 2])
  if refusal then
    out[#out + 1] = refusal[1]
    out[#out + 1] = refusal[7]
  else
    out[#out + 1] = 0
    out[#out + 1] = 0
  end
  local count = #out + 1
  out[count] = 0
  if not refusal and max > 0 and pause == nil then
    local mine = nil
    if ahead then
      mine = {unpack(ahead, at, math.min(at + max - 1, #ahead))}
      at = at + max
    end
    local got, receipts, next_at = hand_out(max, ARGV[a + 3] == '1', prefix, used, lim, out, batch, mine)
    out[count] = got
    taken, used = taken + got, used + receipts
    if next_at then
      pause = next_at
      out[1] = next_at
    end
  end
end
write_active(batch)
READY_N = ready_left(promoted, taken, pause)
return reply(0, append_events(out, promoted))
