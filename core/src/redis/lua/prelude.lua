-- dlock Redis protocol v1: helpers shared by every script that can free a lock.
-- KEYS[1] lock hash, KEYS[2] fence counter, KEYS[3] queue list, KEYS[4] waiter zset.

-- Server time in milliseconds. Only the server's clock is ever used for shared state. It is
-- read once per script, and only by a script that needs it (a release with nobody queued
-- does not): every helper below asks for it where it compares or grants. `stamp` is the same
-- time × 1000 (the floor of fencing tokens) as decimal text made of TIME's own digits: Redis
-- before 7.2 turns a number passed to redis.call into text with printf, the costliest step of
-- an uncontended acquire, so the hot path hands Redis text.
local clock, stamp
local function now_ms()
  if not clock then
    local t = redis.call('TIME')
    local ms = string.sub(string.rep('0', 6 - #t[2]) .. t[2], 1, 3)
    clock, stamp = tonumber(t[1] .. ms), t[1] .. ms .. '000'
  end
  return clock
end

-- Drops queue heads whose waiter lease has run out; returns the live head and its deadline.
local function live_head(queue, waiters)
  while true do
    local head = redis.call('LINDEX', queue, '0')
    if not head then return nil end
    local deadline = redis.call('ZSCORE', waiters, head)
    if deadline and tonumber(deadline) > now_ms() then return head, tonumber(deadline) end
    redis.call('LPOP', queue)
    redis.call('ZREM', waiters, head)
  end
end

-- The fencing token of a new tenure: one more than the last, and never less than the server
-- time in ms × 1000, so tokens keep growing past a restart or failover that lost the counter.
-- Returns it as a number and as decimal text.
local function next_token(fence)
  local token = redis.call('INCR', fence)
  if token < now_ms() * 1000 then
    redis.call('SET', fence, stamp)
    return now_ms() * 1000, stamp
  end
  return token, string.format('%.0f', token)
end

-- Makes `owner` the holder of `lock` (a lock's hash, or a semaphore's permit) in a new tenure
-- that lives `ttl` ms (a number, or the decimal text a client sent); returns its fencing token.
local function grant(lock, owner, fence, ttl)
  local token, text = next_token(fence)
  redis.call('HSET', lock, 'owner', owner, 'count', '1', 'fence', text)
  redis.call('PEXPIRE', lock, ttl)
  return token
end

-- Publishes `word` (a handed tenure's fencing token, or 'free') to the waiter `head`.
local function wake(head, word)
  redis.call('PUBLISH', 'dlock:wake:' .. string.sub(head, 1, 32), head .. ' ' .. word)
end

-- Takes the first live waiter out of the queue: its token and its waiter deadline.
local function pop_head(queue, waiters)
  local head, deadline = live_head(queue, waiters)
  if head then
    redis.call('LPOP', queue)
    redis.call('ZREM', waiters, head)
  end
  return head, deadline
end

-- Hands a free lock to the first live waiter: a new tenure with a new fencing token that
-- lives exactly as long as that waiter's lease, then wakes only that waiter.
local function hand_off(lock, fence, queue, waiters)
  local head, deadline = pop_head(queue, waiters)
  if not head then return 0 end
  wake(head, string.format('%.0f', grant(lock, head, fence, deadline - now_ms())))
  return 1
end

-- Wakes the first live waiter of a lock freed without a hand-off, to come and take it.
local function wake_head(queue, waiters)
  local head = live_head(queue, waiters)
  if head then wake(head, 'free') end
end

-- Queues `token` (or renews its place) until the server time + `wlease`, keeping the queue that long at
-- least; returns the latest fencing token of `fence`.
local function enqueue(queue, waiters, token, wlease, fence)
  if not redis.call('ZSCORE', waiters, token) then redis.call('RPUSH', queue, token) end
  redis.call('ZADD', waiters, now_ms() + wlease, token)
  if redis.call('PTTL', queue) < wlease then
    redis.call('PEXPIRE', queue, wlease)
    redis.call('PEXPIRE', waiters, wlease)
  end
  return tonumber(redis.call('GET', fence) or 0)
end

-- Sets the lock's time to live to `lease` ms unless it already has longer: a lease never shrinks.
local function stretch(lock, lease)
  if redis.call('PTTL', lock) < lease then redis.call('PEXPIRE', lock, lease) end
end
