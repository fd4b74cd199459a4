-- tick: the time-driven work of one partition, run by the holder of its lease.
-- KEYS[18] the partition's fencing token; ARGV[7] the holder's token, ARGV[8] the most
-- entries to handle of each kind.
-- Moves due DELAYED tasks to READY, applies the expiries that are due (DEAD or deleted),
-- applies expired ttrs (a failure: READY, DELAYED or DEAD), removes FINISHED/CANCELLED
-- records whose retention passed, lifts the holds of keys whose time held back passed.
-- Reply payload: the partition's next timer (-1: none), 1 when a batch was full (call again
-- at once), the number of expired ttrs, then the promotions and traced events
-- (`append_events`: fires, and the tasks an expired ttr made DEAD).
-- How long after the end of a retention its record may still take memory (ms).
local RETENTION_SWEEP = 100
local token = tonumber(ARGV[7])
local limit = tonumber(ARGV[8])
local fence = tonumber(redis.call('GET', KEYS[18]) or '0')
if token < fence then
  return refuse(-4, fence)
end
if token > fence then
  redis.call('SET', KEYS[18], ARGV[7])
end
-- The windows that scripts sent before this tick hand out start no earlier (`since_tick`).
if NOW > ticked() then
  redis.call('HSET', INFO, 'ticked', NOW)
  TICKED = NOW
end
local more = 0
local dues = promote(limit)
if SCANNED == limit then
  more = 1
end
if expire_due(limit) == limit then
  more = 1
end
local expired = redis.call('ZRANGEBYSCORE', DEADLINES, '-inf', NOW, 'LIMIT', 0, limit)
if #expired == limit then
  more = 1
end
local ttr_n = 0
for _, id in ipairs(expired) do
  local rec = load(id)
  if rec and rec.state == ACTIVE then
    ttr_n = ttr_n + 1
    -- Out of retries: DEAD by its ttr (a task past its expiry records its own event).
    local exhausted = rec.max >= 0 and rec.retries >= rec.max
    fail(rec, nil, 'ttr_expired', nil)
    if exhausted then
      traced('dead', rec)
    end
  else
    redis.call('ZREM', DEADLINES, id)
  end
end
for _, state in ipairs({FINISHED, CANCELLED}) do
  local gone = redis.call('ZRANGEBYSCORE', EXPIRY[state], '-inf', NOW, 'LIMIT', 0, limit)
  if #gone == limit then
    more = 1
  end
  if #gone > 0 then
    drop_retained(state, gone)
  end
end
local lifted = redis.call('ZRANGEBYSCORE', BLOCKED, '-inf', NOW, 'LIMIT', 0, limit)
if #lifted == limit then
  more = 1
end
for _, key in ipairs(lifted) do
  redis.call('ZREM', BLOCKED, key)
  rewindow(key)
end
local next = nil
for _, key in ipairs({SETS[DELAYED], DEADLINES, EXPIRY[FINISHED], EXPIRY[CANCELLED], EXPIRIES, BLOCKED}) do
  local h = head_score(key)
  if h and (key == EXPIRY[FINISHED] or key == EXPIRY[CANCELLED]) then
    -- The end of a retention is judged exactly by every read (`load`, stats), so only the
    -- memory waits for this sweep: one tick a RETENTION_SWEEP of them, not one a
    -- millisecond at a steady rate of finishes.
    h = h + RETENTION_SWEEP
  end
  if h and (next == nil or h < next) then
    next = h
  end
end
-- The holder learns its own next timer from this reply: no wake-up to publish.
WAKE = nil
return reply(0, append_events({next or -1, more, ttr_n}, dues))
