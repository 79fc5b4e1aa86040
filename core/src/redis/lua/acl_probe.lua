-- ACL PROBE, sent once when a client connects (no lock's life depends on it): which of the
-- commands the scripts run the calling user may not run on a lock's keys or a wake-up
-- channel. Redis 7 applies the user's ACL inside scripts too, so a user without one of them
-- fails to connect, instead of stopping a lock script half-way.
-- KEYS[1]: a key of a lock (under dlock:). ARGV[1]: a wake-up channel. ARGV[2..]: the
-- commands. Replies the commands refused (none before Redis 7, which cannot tell).
if not redis.acl_check_cmd then
  return {}
end
local refused = {}
for i = 2, #ARGV do
  local command = ARGV[i]
  local allowed
  if command == 'publish' then
    allowed = redis.acl_check_cmd(command, ARGV[1], 'probe')
  elseif command == 'time' then
    allowed = redis.acl_check_cmd(command)
  else
    allowed = redis.acl_check_cmd(command, KEYS[1])
  end
  if not allowed then
    refused[#refused + 1] = command
  end
end
return refused
