-- Semaphores: helpers shared by the permit scripts, after the holders' helper. KEYS[1] this
-- permit's hash, KEYS[2] fence counter, KEYS[3] queue list, KEYS[4] waiter zset, KEYS[5]
-- holder zset (owner token scored by fencing token), KEYS[6] number of permits. Every permit
-- hash of a semaphore is its holder's owner token after one prefix.

-- Makes `owner` a holder for `ttl` ms; returns the fencing token of its tenure.
local function grant_permit(prefix, owner, fence, holders, ttl)
  local token = grant(prefix .. owner, owner, fence, ttl)
  redis.call('ZADD', holders, string.format('%.0f', token), owner)
  return token
end

-- Hands up to `free` permits to the first live waiters, one each, as hand_off does a lock.
-- Returns how many were handed.
local function hand_permits(prefix, fence, queue, waiters, holders, free)
  local handed = 0
  while handed < free do
    local head, deadline = pop_head(queue, waiters)
    if not head then break end
    wake(head, string.format('%.0f', grant_permit(prefix, head, fence, holders, deadline - now_ms())))
    handed = handed + 1
  end
  return handed
end

-- Gives back the permit `permit` of `token` (now gone from the holders). A fair release hands
-- the permits now free to the first waiters; 'free' only wakes the first waiter.
local function give_back(permit, token, fence, queue, waiters, holders, capacity, prefix, mode)
  redis.call('DEL', permit)
  redis.call('ZREM', holders, token)
  if mode == 'free' then
    wake_head(queue, waiters)
    return 0
  end
  local held = live_holders(holders, prefix)
  local free = tonumber(redis.call('GET', capacity) or 0) - held
  return hand_permits(prefix, fence, queue, waiters, holders, free)
end
