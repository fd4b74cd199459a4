-- meta: writes or removes one entry of a settings hash and tells the other instances.
-- KEYS[1] the namespace's hash; ARGV[1] 'put' or 'del', ARGV[2] the key, ARGV[3] the value
-- (put), ARGV[4] the events channel, ARGV[5] the calling instance, ARGV[6] the namespace.
-- Reply: 1 when the hash changed (a put always; a del when the key was there), else 0.
local changed
if ARGV[1] == 'put' then
  redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
  changed = 1
else
  changed = redis.call('HDEL', KEYS[1], ARGV[2])
end
if changed == 1 then
  redis.call('PUBLISH', ARGV[4], 'm ' .. ARGV[5] .. ' ' .. ARGV[6])
end
return changed
