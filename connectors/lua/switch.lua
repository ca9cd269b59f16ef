-- Points readers at a new generation and retires the old one.
-- KEYS, ARGV and replies: connectors/scripts.py (this header is not sent to Redis).
local gen = redis.call('GET', KEYS[1]) or '0'
if gen ~= ARGV[1] then
  return redis.error_reply('SWITCHED expected generation ' .. ARGV[1] .. ', found ' .. gen)
end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('SADD', KEYS[2], ARGV[1])
redis.pcall('PUBLISH', KEYS[1], ARGV[2] .. ':')
return 1
