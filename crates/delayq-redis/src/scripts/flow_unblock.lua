-- flow_unblock: lifts the holds of keys that have free permits again (`permit_release` said
-- so): their first tasks go back into READY, up to their room, and are announced.
-- ARGV[7] the number of keys, then the keys.
for i = 1, tonumber(ARGV[7]) do
  local key = ARGV[7 + i]
  if redis.call('ZREM', BLOCKED, key) == 1 then
    rewindow(key)
  end
end
return reply(0)
