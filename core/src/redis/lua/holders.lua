-- Semaphores and read-write locks: a sorted set of holders, each holding a hash of its own
-- (its owner token after one prefix) that lives as long as its lease.

-- The holders whose hash lives: how many, and the least and the most time one has left (-2:
-- none). Holders whose hash has expired are dropped.
local function live_holders(holders, prefix)
  local held, soonest, last = 0, -2, -2
  for _, holder in ipairs(redis.call('ZRANGE', holders, 0, -1)) do
    local pttl = redis.call('PTTL', prefix .. holder)
    if pttl == -2 then
      redis.call('ZREM', holders, holder)
    else
      held = held + 1
      if soonest == -2 or (pttl >= 0 and pttl < soonest) then soonest = pttl end
      if pttl > last then last = pttl end
    end
  end
  return held, soonest, last
end
