-- pause: the pause of the partition's topic (rule 14), kept in every partition so that pop
-- refuses in the same script that would hand out.
-- ARGV[7] the end of the pause (epoch ms; -1: until resumed), or 'resume' to end it.
-- On resume the READY tasks (and the due DELAYED ones) are announced, waking consumers.
if ARGV[7] == 'resume' then
  if redis.call('HDEL', INFO, 'pause') == 1 then
    READY_N = redis.call('ZCARD', SETS[READY]) + redis.call('ZCOUNT', SETS[DELAYED], '-inf', NOW)
  end
else
  redis.call('HSET', INFO, 'pause', ARGV[7])
end
return reply(0)
