-- PERMIT-ACQUIRE. KEYS: permit, fence, queue, waiters, holders, permits.
-- ARGV: owner token, lease ms, permits, mode ('try' | 'wait' | 'refresh'), waiter lease ms,
-- and 'barge' for a non-fair acquire (it takes a free permit even when others queue for one).
-- Replies as ACQUIRE: {1, fencing token, 1} acquired | {0, pttl} busy | {3} not queued |
-- {2, pttl, latest fencing token} queued (pttl: the time the first permit held has left);
-- or {4, permits} when the semaphore is in use with another number of permits.
local permit, fence, queue, waiters = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local holders, capacity = KEYS[5], KEYS[6]
local token, lease, permits = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local mode, wlease, barge = ARGV[4], tonumber(ARGV[5]), ARGV[6] == 'barge'
local prefix = string.sub(permit, 1, #permit - #token)

if redis.call('HGET', permit, 'owner') == token then
  -- Ours already: a retry, or the claim of a hand-off.
  stretch(permit, lease)
  return {1, tonumber(redis.call('HGET', permit, 'fence')), 1}
end
if mode == 'refresh' and not redis.call('ZSCORE', waiters, token) then return {3} end

local held, soonest = live_holders(holders, prefix)
local set = tonumber(redis.call('GET', capacity) or 0)
if set ~= permits then
  -- The number of permits is the semaphore's while anyone holds or waits.
  if held > 0 or live_head(queue, waiters) then return {4, set} end
  redis.call('SET', capacity, permits)
end
local free = permits - held
if free > 0 and barge then
  redis.call('LREM', queue, 1, token)
  redis.call('ZREM', waiters, token)
  return {1, grant_permit(prefix, token, fence, holders, lease), 1}
end
-- Permits that ran out go to the first waiters (perhaps this one), then to newcomers.
free = free - hand_permits(prefix, fence, queue, waiters, holders, free)
if redis.call('HGET', permit, 'owner') == token then
  stretch(permit, lease)
  return {1, tonumber(redis.call('HGET', permit, 'fence')), 1}
end
if free > 0 then
  return {1, grant_permit(prefix, token, fence, holders, lease), 1}
end
held, soonest = live_holders(holders, prefix)
if mode == 'try' then return {0, soonest} end

return {2, soonest, enqueue(queue, waiters, token, wlease, fence)}
