-- One activity query.
-- KEYS, ARGV and replies: connectors/scripts.py (this header is not sent to Redis).
local sid = redis.call('GET', KEYS[2])
if not sid then
  return {'none'}
end
local doc = false
if sid ~= ARGV[2] then
  doc = redis.call('GET', KEYS[3])
end
if ARGV[3] == 'global' then
  return {'snapshot', sid, doc}
end
local z = KEYS[5]
if redis.call('HGET', KEYS[4], ARGV[6]) == 'b' then
  z = KEYS[6]
end
if ARGV[3] == 'top' then
  return {'snapshot', sid, doc, redis.call('ZREVRANGE', z, 0, tonumber(ARGV[4]) - 1, 'WITHSCORES')}
end
local count = redis.call('ZSCORE', z, ARGV[5])
if not count then
  return {'snapshot', sid, doc, false}
end
return {'snapshot', sid, doc, {count, redis.call('ZREVRANK', z, ARGV[5])}}
