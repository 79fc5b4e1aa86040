-- PROCLAIM: the leader of an election publishes its value. KEYS: lock.
-- ARGV: owner token, term (the tenure's fencing token), value.
-- Replies {1, term} stored and published on the election's channel | {0} not this tenure's.
local lock = KEYS[1]
local token, term, value = ARGV[1], ARGV[2], ARGV[3]

local held = redis.call('HMGET', lock, 'owner', 'fence')
if held[1] ~= token or held[2] ~= term then return {0} end
redis.call('HSET', lock, 'value', value)
redis.call('PUBLISH', string.sub(lock, 1, -5) .. 'leader', term .. ' ' .. value)
return {1, tonumber(term)}
