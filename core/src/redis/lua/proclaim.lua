-- PROCLAIM: the leader of an election publishes its value. KEYS: lock. ARGV: owner token, value.
-- Replies {1, term} stored and published on the election's channel | {0} not the owner.
local lock = KEYS[1]
local token, value = ARGV[1], ARGV[2]

if redis.call('HGET', lock, 'owner') ~= token then return {0} end
local term = redis.call('HGET', lock, 'fence')
redis.call('HSET', lock, 'value', value)
redis.call('PUBLISH', string.sub(lock, 1, -5) .. 'leader', term .. ' ' .. value)
return {1, tonumber(term)}
