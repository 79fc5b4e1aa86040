-- STATUS, read only. KEYS: lock, fence, queue, waiters.
-- Replies {owner token or '', hold count, tenure's fencing token, lock pttl, latest fencing token,
-- then the live waiters' tokens in queue order}.
local lock, fence, queue, waiters = KEYS[1], KEYS[2], KEYS[3], KEYS[4]

local reply = {
  redis.call('HGET', lock, 'owner') or '',
  tonumber(redis.call('HGET', lock, 'count') or 0),
  tonumber(redis.call('HGET', lock, 'fence') or 0),
  redis.call('PTTL', lock),
  tonumber(redis.call('GET', fence) or 0),
}
for _, waiter in ipairs(redis.call('LRANGE', queue, 0, -1)) do
  local deadline = redis.call('ZSCORE', waiters, waiter)
  if deadline and tonumber(deadline) > now_ms() then table.insert(reply, waiter) end
end
return reply
