-- LEADER, read only. KEYS: lock.
-- Replies {term, value, pttl}: the holder's fencing token (0 if the lock is free), the value
-- it proclaimed (nil if none) and the lock's time to live.
local lock = KEYS[1]

local held = redis.call('HMGET', lock, 'fence', 'value')
return {tonumber(held[1] or 0), held[2], redis.call('PTTL', lock)}
