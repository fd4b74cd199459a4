-- permit_release: after a pop's `flow_take`, or when tasks left ACTIVE: settles the permits
-- of the tasks taken to their ttr deadlines, gives back the permits of the tasks that left
-- ACTIVE or were not taken, and the rate's tokens of what was granted but not handed out.
-- Slots freed in a topic at its max_active are announced, as a partition's `publish`.
-- ARGV[5] how many tokens to give back, ARGV[6] the number of permits to settle, then 2
-- values each (receipt, deadline), then the number of permits to give back, then those.
begin_permits(KEYS, ARGV)
permit_expire()
local lim = permit_limits()
local was_full = permit_full(lim)
local refund = tonumber(ARGV[5])
local settles = tonumber(ARGV[6])
for i = 0, settles - 1 do
  -- Only a permit that still holds a slot (XX), and only ever earlier: settling never
  -- lengthens what a grant allowed.
  redis.call('ZADD', P_PERMITS, 'XX', 'LT', ARGV[7 + 2 * i + 1], ARGV[7 + 2 * i])
end
local at = 7 + 2 * settles
for i = 1, tonumber(ARGV[at]) do
  permit_free(ARGV[at + i])
end
if lim and lim.interval and refund > 0 then
  local tat = tonumber(redis.call('HGET', P_INFO, 'tat') or '0') - refund * lim.interval
  redis.call('HSET', P_INFO, 'tat', string.format('%.17g', tat))
end
return permit_reply(was_full)
