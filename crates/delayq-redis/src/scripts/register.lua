-- register: records a topic's partition count on its first use and announces the topic.
-- KEYS[1] the registry hash; ARGV[1] the topic, ARGV[2] the partition count this instance
-- would give it, ARGV[3] the events channel, ARGV[4] the calling instance.
-- Reply: the recorded partition count (which may differ from ARGV[2]).
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then
  redis.call('PUBLISH', ARGV[3], 't ' .. ARGV[4] .. ' ' .. ARGV[1] .. ' ' .. ARGV[2])
end
return tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
