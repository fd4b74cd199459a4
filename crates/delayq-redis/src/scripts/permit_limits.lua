-- permit_limits: sets the limits the topic's permits count against (ARGV[5], as a
-- partition's without `,g`), or with '' removes them and every permit. The partitions' keys
-- held back are lifted by their own `limits` call, so the permits forget them too.
-- Reply payload (after `permit_reply`'s): nothing.
begin_permits(KEYS, ARGV)
if ARGV[5] == '' then
  redis.call('DEL', P_PERMITS, P_KEYS, P_KACTIVE, P_INFO, P_BLOCKS)
else
  redis.call('HSET', P_INFO, 'limits', ARGV[5])
  redis.call('DEL', P_BLOCKS)
end
return permit_reply(false)
