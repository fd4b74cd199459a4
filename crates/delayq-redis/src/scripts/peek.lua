-- peek: the first ARGV[8] tasks of the partition in state ARGV[7], in the order that state
-- is taken in, without changing anything but the upgrade of an old partition:
--   1 (READY): priority, due, insertion; the due DELAYED tasks a pop would promote first
--              are included (they are ready, the promoter just has not moved them yet);
--   0 (DELAYED): the tasks not due yet, earliest due first (then insertion);
--   5 (DEAD): oldest buried first, then insertion.
-- Reply: the pause (-2: none, -1: until resumed, else its end), the number of entries, the
-- number of values per entry, then the entries: three order keys (READY: priority, due,
-- insertion; DELAYED: due, insertion, 0; DEAD: when it went DEAD, insertion, 0) and the id,
-- and for READY in a partition whose limits are topic-wide also the task's key ('' none)
-- and ttr, which its permit needs (see "Topic-wide limits" in lib.lua). Insertion numbers
-- are 16-hex-digit strings (compared as strings here: they do not fit a Lua number).
local state = tonumber(ARGV[7])
local max = tonumber(ARGV[8])
local entries = {}
if state == READY then
  local r = redis.call('ZRANGE', SETS[READY], 0, max - 1, 'WITHSCORES')
  for i = 1, #r, 2 do
    local m = r[i]
    entries[#entries + 1] = {
      tonumber(r[i + 1]),
      tonumber(string.sub(m, 1, WIDTH), 16),
      string.sub(m, WIDTH + 1, WIDTH + SEQ_WIDTH),
      member_id(m, READY),
    }
  end
  local due = redis.call('ZRANGEBYSCORE', SETS[DELAYED], '-inf', NOW, 'LIMIT', 0, max)
  for _, id in ipairs(due) do
    local rec = load(id)
    if rec then
      entries[#entries + 1] = {rec.pri, rec.due, rec.seq, id}
    end
  end
elseif state == DELAYED then
  for _, rec in ipairs(delayed_first(max)) do
    entries[#entries + 1] = {rec.due, rec.seq, 0, rec.id}
  end
elseif state == DEAD then
  local r = redis.call('ZRANGE', SETS[DEAD], 0, max - 1, 'WITHSCORES')
  for i = 1, #r, 2 do
    entries[#entries + 1] = {
      tonumber(r[i + 1]),
      string.sub(r[i], 1, SEQ_WIDTH),
      0,
      member_id(r[i], DEAD),
    }
  end
end
table.sort(entries, function(a, b)
  if a[1] ~= b[1] then
    return a[1] < b[1]
  elseif a[2] ~= b[2] then
    return a[2] < b[2]
  elseif a[3] ~= b[3] then
    return a[3] < b[3]
  end
  return a[4] < b[4]
end)
local wide = state == READY and global()
local out = {paused() or -2, math.min(#entries, max), wide and 6 or 4}
for i = 1, math.min(#entries, max) do
  for _, v in ipairs(entries[i]) do
    out[#out + 1] = v
  end
  if wide then
    local rec = load(entries[i][4])
    out[#out + 1] = rec and rec.key or ''
    out[#out + 1] = rec and rec.ttr or 0
  end
end
return out
