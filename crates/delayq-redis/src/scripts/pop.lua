-- pop: takes up to ARGV[7] READY tasks in the order of rule 11 (priority, due, insertion),
-- after promoting what is due (so a partition whose promoter lags, or has none, still never
-- keeps due tasks back) and applying the expiries that are due (so a task is never handed
-- out at or after its expiry, whatever the promoter's lag). A paused partition promotes and
-- expires but hands nothing out (rule 14). A topic's flow limits (`allowance`) bound how many
-- go; when its rate lets none go, the reply gives the instant it will as the pause's end, so
-- the instance wakes its parked consumers then. READY holds only what max_active_per_key
-- lets go (lib.lua), so its first tasks are the ones to take.
-- ARGV[8] '1' to finish them at once, ARGV[9] a random receipt prefix (12 hex digits),
-- ARGV[10] how many due tasks to promote at most. (finish_pop.lua runs this after a finish,
-- with these four arguments two places later: POP_ARG.)
-- Reply payload: the number of tasks taken, the pause (-2: none, -1: until resumed, else its
-- end), 9 values per task (id, body, retries, receipt, due, ttr, priority, insertion
-- number, trace context as the record holds it: '' for none), then what this pop promoted
-- (`append_events`).
local max = tonumber(ARGV[POP_ARG])
local auto = ARGV[POP_ARG + 1] == '1'
local prefix = ARGV[POP_ARG + 2]
local promoted = promote(tonumber(ARGV[POP_ARG + 3]))
expire_due(tonumber(ARGV[POP_ARG + 3]))
local pause = paused()
local members = {}
local lim = limits()
if pause == nil then
  local next_at
  max, next_at = allowance(max, lim)
  if max > 0 then
    members = redis.call('ZRANGE', SETS[READY], 0, max - 1)
  elseif next_at and redis.call('ZCARD', SETS[READY]) > 0 then
    pause = next_at
  end
end
local out = {0, pause or -2}
if #members > 0 then
  redis.call('ZREM', SETS[READY], unpack(members))
end
local taken = 0
for i, m in ipairs(members) do
  local id = member_id(m, READY)
  local rec = load(id)
  if rec and is_expired(rec) then
    -- Past what expire_due's batch reached: never handed out either.
    expire(rec)
  elseif rec then
    if rec.expires then
      redis.call('ZREM', EXPIRIES, id)
    end
    if rec.key then
      redis.call('ZREM', KORDER, key_member(rec))
    end
    taken = taken + 1
    local receipt = prefix .. string.format('%04x', i)
    if auto then
      enter(rec, FINISHED, rec.due)
      if rec.key then
        settle(rec.key)
      end
    else
      activate(rec, receipt)
    end
    out[#out + 1] = id
    out[#out + 1] = rec.body
    out[#out + 1] = rec.retries
    out[#out + 1] = receipt
    out[#out + 1] = rec.due
    out[#out + 1] = rec.ttr
    out[#out + 1] = rec.pri
    out[#out + 1] = rec.seq
    out[#out + 1] = rec.trace
  end
end
out[1] = taken
spend(lim, taken)
-- Wake other consumers only for what this pop promoted and left behind, and only when they
-- can take it; held tasks that a hand-out let into READY count too.
if pause == nil then
  READY_N = math.max(0, #promoted - taken) + MOVED
else
  READY_N = 0
end
return reply(0, append_events(out, promoted))
