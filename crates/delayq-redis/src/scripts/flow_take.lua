-- flow_take: hands out the tasks of a partition of a topic with topic-wide limits that
-- `permit_grant` granted (see "Topic-wide limits" in lib.lua), after promoting what is due
-- and applying the expiries that are due, as pop.lua does; and holds back the keys the
-- permits refused. A grant goes only when its task is still READY and not held back, not
-- expired, the partition is not paused, and the task's ttr would end within its permit
-- (a grant that arrives late is refused rather than outlasted).
-- ARGV[7] how many due tasks to promote at most, ARGV[8] '1' to finish them at once,
-- ARGV[9] the number of grants, then 3 values each (id, receipt, until when its permit
-- lasts), then the number of keys to hold back, then 2 values each (key, until when).
-- Reply payload: the pause (-2: none, -1: until resumed, else its end), the number of grants,
-- per grant 1 and 10 values (`hand_out`'s) and the ttr deadline (0 when finished at once),
-- or 0 when it did not go; then what this script promoted (`append_events`).
local promoted = promote(tonumber(ARGV[7]))
expire_due(tonumber(ARGV[7]))
local auto = ARGV[8] == '1'
local pause = paused()
local n = tonumber(ARGV[9])
local out = {pause or -2, n}
local taken = 0
for i = 0, n - 1 do
  local a = 10 + 3 * i
  local rec = pause == nil and load(ARGV[a])
  local m = rec and rec.state == READY and member(rec, READY)
  local go = m and redis.call('ZSCORE', SETS[READY], m)
  if go and is_expired(rec) then
    expire(rec)
    go = false
  end
  if go and (auto or UPPER + rec.ttr <= tonumber(ARGV[a + 2])) then
    redis.call('ZREM', SETS[READY], m)
    if rec.expires then
      redis.call('ZREM', EXPIRIES, rec.id)
    end
    if rec.key then
      redis.call('ZREM', KORDER, key_member(rec))
    end
    taken = taken + 1
    if auto then
      enter(rec, FINISHED, rec.due)
      if rec.key then
        settle(rec.key)
      end
    else
      activate(rec, ARGV[a + 1])
    end
    for _, v in ipairs({1, rec.id, rec.body, rec.retries, ARGV[a + 1], rec.due, rec.ttr, rec.pri, rec.seq, rec.trace, rec.key or ''}) do
      out[#out + 1] = v
    end
    out[#out + 1] = auto and 0 or rec.deadline
  else
    out[#out + 1] = 0
  end
end
local at = 10 + 3 * n
for i = 0, tonumber(ARGV[at]) - 1 do
  local key, until_ms = ARGV[at + 1 + 2 * i], tonumber(ARGV[at + 2 + 2 * i])
  note_timer(BLOCKED, until_ms)
  redis.call('ZADD', BLOCKED, 'GT', until_ms, key)
  rewindow(key)
end
READY_N = ready_left(promoted, taken, pause)
return reply(0, append_events(out, promoted))
