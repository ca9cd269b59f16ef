-- Records who the run owning a generation is (for `rankflow status`), unless a newer run did.
-- KEYS, ARGV and replies: connectors/scripts.py (this header is not sent to Redis).
local token = tonumber(ARGV[1])
if token < tonumber(redis.call('GET', KEYS[1]) or '0') then
  return 0
end
if token <= tonumber(redis.call('HGET', KEYS[2], 'token') or '0') then
  return 0
end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'token', ARGV[1], 'run_id', ARGV[2], 'host', ARGV[3], 'pid', ARGV[4],
           'since', ARGV[5], 'command', ARGV[6], 'dead_letter', ARGV[7])
return 1
