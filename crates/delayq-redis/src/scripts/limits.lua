-- limits: the flow limits of the partition's topic (docs/flow-control.md), kept in the
-- partition so that pop checks them in the same script that hands out.
-- ARGV[7] `<max_active>,<ms between hand-outs>,<burst>` (empty parts: none), or '' to remove
-- them. The READY tasks are announced: a raised or removed limit may let parked consumers go.
if ARGV[7] == '' then
  redis.call('HDEL', INFO, 'limits', 'tat')
else
  redis.call('HSET', INFO, 'limits', ARGV[7])
end
READY_N = redis.call('ZCARD', SETS[READY])
return reply(0)
