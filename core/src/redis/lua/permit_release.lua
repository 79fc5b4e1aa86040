-- PERMIT-RELEASE. KEYS: permit, fence, queue, waiters, holders, permits. ARGV: owner token,
-- and 'free' for a non-fair release (the permit is freed and the first waiter woken to race
-- for it). Replies as RELEASE: {0} not the owner | {2, handed} freed (handed: permits passed
-- on to waiters).
local permit, fence, queue, waiters = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local holders, capacity = KEYS[5], KEYS[6]
local token = ARGV[1]
local prefix = string.sub(permit, 1, #permit - #token)

if redis.call('HGET', permit, 'owner') ~= token then return {0} end
local handed = give_back(permit, token, fence, queue, waiters, holders, capacity, prefix, ARGV[2])
return {2, handed}
