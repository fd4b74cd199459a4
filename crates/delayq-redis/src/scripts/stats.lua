-- stats: the counters of one partition, O(1): the size of each state's set, less the
-- retained records whose retention already passed (not yet purged).
-- Reply: six counts in state order, the earliest due of a DELAYED task (-1: none), the
-- pause (-2: none, -1: until resumed, else its end), how many tasks expired, then the READY
-- tasks the flow limits hold back: by max_active, by the rate, by max_active_per_key, then 1
-- when the limits are topic-wide (the permits say what max_active and the rate hold back,
-- `permit_stats`; here only the keys held back count). READY counts the held keyed tasks
-- too (they are READY; KEYS[14] holds them apart).
local out = {}
for state = 0, 5 do
  out[state + 1] = redis.call('ZCARD', SETS[state])
end
for _, state in ipairs({FINISHED, CANCELLED}) do
  out[state + 1] = out[state + 1] - redis.call('ZCOUNT', EXPIRY[state], '-inf', NOW)
end
out[7] = head_score(SETS[DELAYED]) or -1
out[8] = paused() or -2
out[9] = tonumber(redis.call('HGET', INFO, 'expired') or '0')
local held = redis.call('ZCARD', HELD)
out[READY + 1] = out[READY + 1] + held
out[10], out[11], out[12] = 0, 0, held
out[13] = global() and 1 or 0
local allowed, next_at = allowance(1, limits(), 0)
if allowed == 0 and out[13] == 0 then
  -- A task counts under the first limit that holds it: max_active, the rate, its key.
  out[next_at and 11 or 10] = out[READY + 1]
  out[12] = 0
end
return out
