-- FENCED WRITE, for the resource a lock protects (not part of the lock protocol): stores a
-- value only under a fencing token at least as new as every token it stored before, so that
-- a holder who lost its lock without knowing cannot overwrite the work of a newer holder.
-- KEYS[1]: the resource, a hash with fields `value` and `fence`. ARGV: token, value.
-- Replies {1, token} when written, {0, highest token stored} when refused.
local token, highest = ARGV[1], redis.call('HGET', KEYS[1], 'fence') or '0'
if not string.match(token, '^[1-9][0-9]*$') then
  return redis.error_reply('ERR dlock fenced write: the token must be a positive decimal integer')
end
-- Decimal numbers without leading zeros: the longer is larger; of equal length, compare the
-- text (exact for every 64-bit token, where tonumber would round above 2^53).
if #token < #highest or (#token == #highest and token < highest) then
  return {0, highest}
end
redis.call('HSET', KEYS[1], 'fence', token, 'value', ARGV[2])
return {1, token}
