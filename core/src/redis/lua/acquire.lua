-- ACQUIRE. KEYS: lock, fence, queue, waiters.
-- ARGV: owner token, lease ms, hold count, mode ('try' | 'wait' | 'refresh'), waiter lease ms,
-- and 'barge' for a non-fair acquire (it takes a free lock even when others queue for it).
-- Replies {1, fencing token, count} acquired | {0, pttl} busy | {3} not queued |
-- {2, pttl, latest fencing token} queued (a later hand-off to us has a larger token).
local lock, fence, queue, waiters = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, mode = ARGV[1], ARGV[4]

-- Free, and nobody queued: the common case, in one call.
if mode ~= 'refresh' and redis.call('EXISTS', lock, queue) == 0 then
  return {1, grant(lock, token, fence, ARGV[2]), 1}
end
local lease, count, wlease, barge = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[5]), ARGV[6] == 'barge'
local owner = redis.call('HGET', lock, 'owner')
if owner == token then
  -- Ours already: a reentrant acquire, a retry, or the claim of a hand-off.
  redis.call('HSET', lock, 'count', count)
  stretch(lock, lease)
  return {1, tonumber(redis.call('HGET', lock, 'fence')), count}
end
if mode == 'refresh' and not redis.call('ZSCORE', waiters, token) then return {3} end

if not owner then
  local head = live_head(queue, waiters)
  if not head or head == token or barge then
    if head then
      redis.call('LREM', queue, 1, token)
      redis.call('ZREM', waiters, token)
    end
    return {1, grant(lock, token, fence, lease), 1}
  end
end
if mode == 'try' then return {0, redis.call('PTTL', lock)} end

local latest = enqueue(queue, waiters, token, wlease, fence)
return {2, redis.call('PTTL', lock), latest}
