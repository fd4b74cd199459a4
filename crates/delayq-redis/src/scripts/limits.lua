-- limits: the flow limits of the partition's topic (docs/flow-control.md), kept in the
-- partition so that pop checks them in the same script that hands out.
-- ARGV[7] `<max_active>,<ms between hand-outs>,<burst>,<max_active_per_key>` (empty parts:
-- none; then `,g` when they are topic-wide, see "Topic-wide limits" at the top of lib.lua),
-- or '' to remove them. Every keyed READY task is put back in its key's window under the
-- new per-key limit (O(keyed READY tasks): limits change rarely), and no key stays held back
-- by the permits. The READY tasks are announced: a raised or removed limit may let parked
-- consumers go.
-- Reply payload: with topic-wide limits, the number of ACTIVE tasks, then 3 values each
-- (receipt, key or '', ttr deadline), for the permits to count them.
if ARGV[7] == '' then
  redis.call('HDEL', INFO, 'limits', 'tat')
else
  redis.call('HSET', INFO, 'limits', ARGV[7])
end
LIM = nil
local held = redis.call('ZRANGE', HELD, 0, -1, 'WITHSCORES')
for i = 1, #held, 2 do
  redis.call('ZADD', SETS[READY], held[i + 1], held[i])
end
redis.call('DEL', HELD, BLOCKED)
local lim = limits()
if lim and lim.per_key then
  local key, n, room = nil, 0, 0
  for _, km in ipairs(redis.call('ZRANGE', KORDER, 0, -1)) do
    local k = string.match(km, '^[^ ]*')
    if k ~= key then
      key, n, room = k, 0, key_room(k)
    end
    n = n + 1
    if n > room then
      key_move(k, km, false)
    end
  end
end
READY_N = redis.call('ZCARD', SETS[READY])
if not global() then
  return reply(0)
end
local active = redis.call('ZRANGE', SETS[ACTIVE], 0, -1)
local out = {0}
for _, id in ipairs(active) do
  local rec = load(id)
  if rec and rec.state == ACTIVE then
    out[1] = out[1] + 1
    out[#out + 1] = rec.receipt
    out[#out + 1] = rec.key or ''
    out[#out + 1] = rec.deadline
  end
end
return reply(0, out)
