-- RELEASE. KEYS: lock, fence, queue, waiters. ARGV: owner token, hold count left, and 'free'
-- for a non-fair release (the lock is freed and the first waiter woken to race for it).
-- Replies {0} not the owner | {1, count} still held | {2, handed} freed (handed: 1 if a waiter got it).
local lock, fence, queue, waiters = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, count = ARGV[1], tonumber(ARGV[2])

if redis.call('HGET', lock, 'owner') ~= token then return {0} end
if count > 0 then
  redis.call('HSET', lock, 'count', count)
  return {1, count}
end
redis.call('DEL', lock)
if ARGV[3] == 'free' then
  wake_head(queue, waiters)
  return {2, 0}
end
return {2, hand_off(lock, fence, queue, waiters)}
