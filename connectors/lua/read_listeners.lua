-- What a listener reader needs to follow the latest snapshot.
-- KEYS, ARGV and replies: connectors/scripts.py (this header is not sent to Redis).
local sid = redis.call('GET', KEYS[2])
if not sid then
  return {g}
end
if sid == ARGV[2] and g == ARGV[3] then
  return {g, sid}
end
local snapshot = redis.call('GET', KEYS[3])
if g ~= ARGV[3] or ARGV[4] == '' then
  local last = redis.call('XREVRANGE', KEYS[4], '+', '-', 'COUNT', 1)
  local at = '0-0'
  if last[1] then
    at = last[1][1]
  end
  return {g, sid, snapshot, 'table', at, redis.call('ZRANGE', KEYS[5], 0, -1, 'WITHSCORES')}
end
return {g, sid, snapshot, 'changes', redis.call('XRANGE', KEYS[4], '(' .. ARGV[4], '+')}
