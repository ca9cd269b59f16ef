-- The writer checks of the publish prelude, for the activity scripts that readers do not see.
-- KEYS, ARGV and replies: connectors/scripts.py (this header is not sent to Redis).
if ARGV[3] == 'live' then
  local gen = redis.call('GET', KEYS[1])
  if gen and gen ~= ARGV[2] then
    return redis.error_reply('SWITCHED generation ' .. ARGV[2] .. ' was replaced by generation ' .. gen)
  end
end
local owner = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[1]) < owner then
  return redis.error_reply('FENCED run ' .. ARGV[1] .. ' is not the owner; current owner is run ' .. owner)
end
