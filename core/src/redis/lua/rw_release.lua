-- RW-RELEASE. KEYS: own, fence, queue, waiters, readers, writer, modes. ARGV: owner token,
-- hold count left. Replies as RELEASE: {0} not the owner | {1, count} still held |
-- {2, handed} freed (handed: waiters the lock went to).
local own, fence, queue, waiters = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local readers, writer, modes = KEYS[5], KEYS[6], KEYS[7]
local token, count = ARGV[1], tonumber(ARGV[2])
local prefix = string.sub(writer, 1, #writer - 5) .. 'read:'

if redis.call('HGET', own, 'owner') ~= token then return {0} end
if count > 0 then
  redis.call('HSET', own, 'count', count)
  return {1, count}
end
redis.call('DEL', own)
redis.call('ZREM', readers, token)
return {2, hand_rw(fence, queue, waiters, readers, writer, modes, prefix)}
