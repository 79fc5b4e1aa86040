-- RW-ACQUIRE. KEYS: own, fence, queue, waiters, readers, writer, modes.
-- ARGV: owner token, lease ms, hold count, mode ('try' | 'wait' | 'refresh'), waiter lease ms,
-- 'read' or 'write', and for a read by the owner of the write hold, that hold's owner token
-- (a writer may take read holds beside its own: downgrade).
-- Replies as ACQUIRE: {1, fencing token, count} | {0, pttl} | {3} | {2, pttl, latest}.
local own, fence, queue, waiters = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local readers, writer, modes = KEYS[5], KEYS[6], KEYS[7]
local token, lease, count = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local mode, wlease, want, mine = ARGV[4], tonumber(ARGV[5]), ARGV[6], ARGV[7]
local prefix = string.sub(writer, 1, #writer - 5) .. 'read:'

-- Ours already: a reentrant acquire, a retry, or the claim of a hand-off.
local function ours()
  if redis.call('HGET', own, 'owner') ~= token then return nil end
  redis.call('HSET', own, 'count', count)
  stretch(own, lease)
  return {1, tonumber(redis.call('HGET', own, 'fence')), count}
end

local held = ours()
if held then return held end
if mode == 'refresh' and not redis.call('ZSCORE', waiters, token) then return {3} end

-- Holders that ran out make way for the first waiters (perhaps this one).
hand_rw(fence, queue, waiters, readers, writer, modes, prefix)
held = ours()
if held then return held end

local head = live_head(queue, waiters)
local first = not head or head == token
local writing = redis.call('HGET', writer, 'owner')
local take
if want == 'write' then
  take = first and not writing and live_holders(readers, prefix) == 0
else
  take = (first and not writing) or (mine ~= nil and writing == mine)
end
if take then
  redis.call('LREM', queue, 1, token)
  redis.call('ZREM', waiters, token)
  redis.call('HDEL', modes, token)
  if want == 'write' then return {1, grant(writer, token, fence, lease), 1} end
  local f = grant(own, token, fence, lease)
  redis.call('ZADD', readers, string.format('%.0f', f), token)
  return {1, f, 1}
end
local _, _, last = live_holders(readers, prefix)
local pttl = writing and redis.call('PTTL', writer) or last
if mode == 'try' then return {0, pttl} end

local latest = enqueue(queue, waiters, token, wlease, fence)
redis.call('HSET', modes, token, want)
if redis.call('PTTL', modes) < wlease then redis.call('PEXPIRE', modes, wlease) end
return {2, pttl, latest}
