-- DEQUEUE: a waiter gives up (cancelled, timed out, or cleaning up after a failed request).
-- KEYS: lock, fence, queue, waiters. ARGV: owner token.
-- Replies 2 if the lock had already been handed to it (now passed on), 1 if it left the queue, 0 otherwise.
local lock, fence, queue, waiters = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token = ARGV[1]

if redis.call('HGET', lock, 'owner') == token then
  redis.call('DEL', lock)
  hand_off(lock, fence, queue, waiters)
  return 2
end
redis.call('LREM', queue, 0, token)
return redis.call('ZREM', waiters, token)
