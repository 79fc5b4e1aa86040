-- REDISSON-ACQUIRE: Redisson's RLock acquire (RedissonLock.tryLockInnerAsync), one tenure per
-- hash field, with a fencing token from RFencedLock's counter.
-- KEYS: the lock hash (the lock's raw name), the token counter (redisson_lock_token:{name}).
-- ARGV: hash field, lease ms.
-- Replies {1, fencing token} acquired (again, if the field holds it: an earlier try whose
-- reply was lost, whose lease never shrinks one a renewal gave) | {0, pttl} held by another
-- field (-1: without expiry).
local lock, fence = KEYS[1], KEYS[2]
local field, lease = ARGV[1], tonumber(ARGV[2])

if redis.call('EXISTS', lock) == 0 then
  redis.call('HSET', lock, field, 1)
  redis.call('PEXPIRE', lock, lease)
  return {1, (next_token(fence))}
end
if redis.call('HEXISTS', lock, field) == 1 then
  stretch(lock, lease)
  return {1, (next_token(fence))}
end
return {0, redis.call('PTTL', lock)}
