-- REDISSON-RELEASE: the final release of a Redisson-compatible hold, as RLock's unlock frees
-- a lock: delete the hash and publish 0 (LockPubSub.UNLOCK_MESSAGE) on the lock's channel,
-- which wakes Redisson's waiters and dlock's alike: by PUBLISH, and on Redis 7 and later by
-- SPUBLISH too, for those that listen by sharded pub/sub (on a cluster, Redisson 3.22 and
-- later and dlock's own).
-- KEYS: the lock hash. ARGV: hash field, channel (redisson_lock__channel:{name}).
-- Replies 1 released | 0 the field does not hold the lock.
local lock = KEYS[1]
local field, channel = ARGV[1], ARGV[2]

if redis.call('HEXISTS', lock, field) == 0 then return 0 end
redis.call('DEL', lock)
redis.call('PUBLISH', channel, 0)
if (redis.REDIS_VERSION_NUM or 0) >= 0x070000 then redis.call('SPUBLISH', channel, 0) end
return 1
