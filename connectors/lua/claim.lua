-- Makes a token the owner of a generation unless a newer token owns it.
-- KEYS, ARGV and replies: connectors/scripts.py (this header is not sent to Redis).
local owner = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) > owner then
  redis.call('SET', KEYS[1], ARGV[1])
end
return redis.call('GET', KEYS[1])
