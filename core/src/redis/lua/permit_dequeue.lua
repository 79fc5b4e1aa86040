-- PERMIT-DEQUEUE: a waiter gives up. KEYS: permit, fence, queue, waiters, holders, permits.
-- ARGV: owner token. Replies as DEQUEUE: 2 if a permit had already been handed to it (now
-- passed on), 1 if it left the queue, 0 otherwise.
local permit, fence, queue, waiters = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local holders, capacity = KEYS[5], KEYS[6]
local token = ARGV[1]
local prefix = string.sub(permit, 1, #permit - #token)

if redis.call('HGET', permit, 'owner') == token then
  give_back(permit, token, fence, queue, waiters, holders, capacity, prefix, 'fair')
  return 2
end
redis.call('LREM', queue, 0, token)
return redis.call('ZREM', waiters, token)
