-- permit_stats: what the topic's permits hold back now, for its stats.
-- Reply payload (after `permit_reply`'s): the permits held (ACTIVE tasks, and grants not yet
-- settled), 1 when the topic is at its max_active, 1 when its rate has no token now.
begin_permits(KEYS, ARGV)
permit_expire()
local lim = permit_limits()
local no_token = 0
if lim and lim.interval and rate_room(lim, tat_at(P_INFO, UPPER)) == 0 then
  no_token = 1
end
return permit_reply(false, {redis.call('ZCARD', P_PERMITS), permit_full(lim) and 1 or 0, no_token})
