-- Read-write locks: helpers shared by the RW scripts, after the holders' helper. KEYS[1] this
-- tenure's hash (the writer's, or one reader's), KEYS[2] fence counter, KEYS[3] queue list,
-- KEYS[4] waiter zset, KEYS[5] reader zset (owner token scored by fencing token), KEYS[6] the
-- writer's hash, KEYS[7] waiter modes (owner token -> 'read' | 'write'). A reader's hash is
-- its owner token after the writer's key with 'write' replaced by 'read:'.

-- Hands the lock to the first live waiters, as hand_off does: a waiting writer once neither
-- a writer nor a reader holds, or every waiting reader up to the first waiting writer while
-- no writer holds. Returns how many were handed the lock.
local function hand_rw(fence, queue, waiters, readers, writer, modes, prefix)
  if redis.call('EXISTS', writer) == 1 then return 0 end
  local held = live_holders(readers, prefix)
  local handed = 0
  while true do
    local head = live_head(queue, waiters)
    if not head then break end
    local want = redis.call('HGET', modes, head)
    if want == 'write' and held > 0 then break end
    local _, deadline = pop_head(queue, waiters)
    redis.call('HDEL', modes, head)
    local token
    if want == 'write' then
      token = grant(writer, head, fence, deadline - now_ms())
    else
      token = grant(prefix .. head, head, fence, deadline - now_ms())
      redis.call('ZADD', readers, string.format('%.0f', token), head)
      held = held + 1
    end
    wake(head, string.format('%.0f', token))
    handed = handed + 1
    if want == 'write' then break end
  end
  return handed
end
