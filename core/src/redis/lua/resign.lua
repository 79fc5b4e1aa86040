-- RESIGN: the final release of an election's leader, which tells its observers.
-- KEYS: lock, fence, queue, waiters. ARGV: owner token.
-- Replies {0} not the owner | {2, handed} freed (handed: 1 if a waiter got it), as RELEASE.
local lock, fence, queue, waiters = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token = ARGV[1]

if redis.call('HGET', lock, 'owner') ~= token then return {0} end
local term = redis.call('HGET', lock, 'fence')
redis.call('DEL', lock)
local handed = hand_off(lock, fence, queue, waiters)
redis.call('PUBLISH', string.sub(lock, 1, -5) .. 'leader', term)
return {2, handed}
