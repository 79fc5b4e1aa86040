-- RAISE (Redlock): records the fencing token a tenure chose from a majority of nodes on one
-- node, while the token still owns the lock there. KEYS: lock, fence.
-- ARGV: owner token, fencing token. Never lowers the counter.
-- Replies 1 recorded | 0 not the owner.
local lock, fence = KEYS[1], KEYS[2]
if redis.call('HGET', lock, 'owner') ~= ARGV[1] then return 0 end
if tonumber(redis.call('GET', fence) or 0) < tonumber(ARGV[2]) then
  redis.call('SET', fence, ARGV[2])
end
redis.call('HSET', lock, 'fence', ARGV[2])
return 1
