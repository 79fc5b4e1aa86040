-- Read-write locks: helpers shared by the RW scripts. KEYS[1] this tenure's hash (the
-- writer's, or one reader's), KEYS[2] fence counter, KEYS[3] queue list, KEYS[4] waiter zset,
-- KEYS[5] reader zset (owner token scored by fencing token), KEYS[6] the writer's hash,
-- KEYS[7] waiter modes (owner token -> 'read' | 'write'). A reader's hash is its owner token
-- after the writer's key with 'write' replaced by 'read:'.

-- The readers holding, and the time the last of them has left. Readers whose hash has
-- expired are dropped.
local function live_readers(readers, prefix)
  local held, last = 0, -2
  for _, reader in ipairs(redis.call('ZRANGE', readers, 0, -1)) do
    local pttl = redis.call('PTTL', prefix .. reader)
    if pttl == -2 then
      redis.call('ZREM', readers, reader)
    else
      held = held + 1
      if pttl > last then last = pttl end
    end
  end
  return held, last
end

-- Hands the lock to the first live waiters, as hand_off does: a waiting writer once neither
-- a writer nor a reader holds, or every waiting reader up to the first waiting writer while
-- no writer holds. Returns how many were handed the lock.
local function hand_rw(fence, queue, waiters, readers, writer, modes, prefix, now)
  if redis.call('EXISTS', writer) == 1 then return 0 end
  local held = live_readers(readers, prefix)
  local handed = 0
  while true do
    local head = live_head(queue, waiters, now)
    if not head then break end
    local want = redis.call('HGET', modes, head)
    if want == 'write' and held > 0 then break end
    local _, deadline = pop_head(queue, waiters, now)
    redis.call('HDEL', modes, head)
    local token
    if want == 'write' then
      token = grant(writer, head, fence, now, deadline - now)
    else
      token = grant(prefix .. head, head, fence, now, deadline - now)
      redis.call('ZADD', readers, string.format('%.0f', token), head)
      held = held + 1
    end
    wake(head, string.format('%.0f', token))
    handed = handed + 1
    if want == 'write' then break end
  end
  return handed
end
