-- permit_hold: a permit for a task that stays ACTIVE longer (touch) or became ACTIVE outside
-- a pop (beanstalkd's reserve-job, an ACTIVE task of a topic whose limits were just set).
-- ARGV[5] the receipt, ARGV[6] its key ('' none), ARGV[7] until when, ARGV[8] '1' to hold it
-- whatever the limits say (reserve-job is an operator's explicit act, and a task already
-- ACTIVE is so), else only when the permit still holds a slot or the limits have room.
-- Reply payload (after `permit_reply`'s): 1 held, 0 refused (no room).
begin_permits(KEYS, ARGV)
permit_expire()
local lim = permit_limits()
local r, key, until_ms = ARGV[5], ARGV[6], tonumber(ARGV[7])
if redis.call('ZSCORE', P_PERMITS, r) then
  redis.call('ZADD', P_PERMITS, 'GT', until_ms, r)
  return permit_reply(false, {1})
end
if ARGV[8] == '1' or not lim or permit_room(lim, key) then
  permit_take(r, key, until_ms)
  return permit_reply(false, {1})
end
return permit_reply(false, {0})
