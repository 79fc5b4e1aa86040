-- RW-DEQUEUE: a waiter gives up. KEYS: own, fence, queue, waiters, readers, writer, modes.
-- ARGV: owner token. Replies as DEQUEUE: 2 if the lock had already been handed to it (now
-- passed on), 1 if it left the queue, 0 otherwise.
local own, fence, queue, waiters = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local readers, writer, modes = KEYS[5], KEYS[6], KEYS[7]
local token = ARGV[1]
local prefix = string.sub(writer, 1, #writer - 5) .. 'read:'

if redis.call('HGET', own, 'owner') == token then
  redis.call('DEL', own)
  redis.call('ZREM', readers, token)
  hand_rw(fence, queue, waiters, readers, writer, modes, prefix)
  return 2
end
redis.call('LREM', queue, 0, token)
redis.call('HDEL', modes, token)
return redis.call('ZREM', waiters, token)
