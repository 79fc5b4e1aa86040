-- REDISSON-STATUS, read only. KEYS: the lock hash, the token counter.
-- Replies {holder fields and counts as HGETALL gives them, pttl, latest token}: a Redisson
-- holder's field is <client uuid>:<thread id>, a dlock holder's <client id>:<tenure>.
local reply = redis.call('HGETALL', KEYS[1])
reply[#reply + 1] = redis.call('PTTL', KEYS[1])
reply[#reply + 1] = tonumber(redis.call('GET', KEYS[2]) or '0')
return reply
