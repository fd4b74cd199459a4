-- permit_grant: permits for a pop's candidates of a topic of several partitions, in rule 11's
-- order (see "Topic-wide limits" in lib.lua): while the topic has room under its max_active
-- and its rate has a token, each candidate gets a permit unless its key has max_active_per_key
-- permits already; such a key is held back in the candidate's partition until it has a free
-- permit again (at most ARGV[8] ms: if that news is lost, the partition looks again then).
-- A permit lasts until the start of the candidate's ttr window plus its ttr plus the grace
-- ARGV[5]: `flow_take` refuses a grant it would outlast, and `permit_release` settles it to
-- the task's deadline.
-- ARGV[6] '1' to finish the tasks at once (no permit: they never become ACTIVE; the rate
-- still counts them), ARGV[7] the most permits to grant, ARGV[9] the number of candidates,
-- then 4 values per candidate: its receipt, its key ('' none), its ttr, its partition.
-- Reply payload (after `permit_reply`'s): when the topic's limits let the next task go (-1:
-- nothing waits on them, or the candidates ran out first), the number of candidates, 1 or
-- 0 per candidate (granted), the number of keys to hold back, then per key: the key, the
-- partition, until when.
begin_permits(KEYS, ARGV)
permit_expire()
local lim = permit_limits()
local grace, auto, want, hold = tonumber(ARGV[5]), ARGV[6] == '1', tonumber(ARGV[7]), tonumber(ARGV[8])
local n = tonumber(ARGV[9])
local out = {-1, n}
local granted, stopped, next_at = 0, false, nil
local holds, held = {}, {}
for i = 0, n - 1 do
  local a = 10 + 4 * i
  local r, key, ttr, part = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2]), ARGV[a + 3]
  local ok = false
  if granted < want and not stopped then
    if not lim then
      -- The limits were removed meanwhile: the partitions follow at once.
      ok = true
    elseif lim.max and redis.call('ZCARD', P_PERMITS) >= lim.max then
      stopped = true
      local first = redis.call('ZRANGE', P_PERMITS, 0, 0, 'WITHSCORES')
      next_at = tonumber(first[2])
    elseif lim.interval and rate_room(lim, tat_at(P_INFO, UPPER)) == 0 then
      stopped = true
      next_at = select(2, rate_room(lim, tat_at(P_INFO, UPPER)))
    elseif key ~= '' and not permit_room(lim, key) then
      if not held[key .. ' ' .. part] then
        held[key .. ' ' .. part] = true
        holds[#holds + 1] = {key, part}
        local parts = redis.call('HGET', P_BLOCKS, key)
        if not parts then
          redis.call('HSET', P_BLOCKS, key, part)
        elseif not string.find(',' .. parts .. ',', ',' .. part .. ',', 1, true) then
          redis.call('HSET', P_BLOCKS, key, parts .. ',' .. part)
        end
      end
    else
      ok = true
    end
  end
  if ok then
    granted = granted + 1
    if lim and not auto then
      permit_take(r, key, UPPER + ttr + grace)
    end
    if lim and lim.interval then
      redis.call('HSET', P_INFO, 'tat', string.format('%.17g', tat_at(P_INFO, UPPER) + lim.interval))
    end
  end
  out[#out + 1] = ok and 1 or 0
end
out[1] = next_at or -1
out[#out + 1] = #holds
for _, h in ipairs(holds) do
  out[#out + 1] = h[1]
  out[#out + 1] = h[2]
  out[#out + 1] = NOW + hold
end
return permit_reply(false, out)
