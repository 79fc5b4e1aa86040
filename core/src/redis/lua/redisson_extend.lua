-- REDISSON-EXTEND, batched: Redisson's watchdog renewal (if the field holds, PEXPIRE).
-- KEYS: lock hashes. ARGV: hash field and lease ms for each key, in order.
-- Replies one integer per key: 1 extended (its lease never shrinks), 0 not the holder.
local result = {}
for i, lock in ipairs(KEYS) do
  if redis.call('HEXISTS', lock, ARGV[2 * i - 1]) == 1 then
    stretch(lock, tonumber(ARGV[2 * i]))
    result[i] = 1
  else
    result[i] = 0
  end
end
return result
