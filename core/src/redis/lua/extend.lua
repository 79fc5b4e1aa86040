-- EXTEND, batched. KEYS: lock hashes. ARGV: owner token and lease ms for each key, in order.
-- Replies one integer per key: 1 extended (its lease never shrinks), 0 not the owner.
local result = {}
for i, lock in ipairs(KEYS) do
  if redis.call('HGET', lock, 'owner') == ARGV[2 * i - 1] then
    stretch(lock, tonumber(ARGV[2 * i]))
    result[i] = 1
  else
    result[i] = 0
  end
end
return result
