-- The token and generation of one run, the same for every process of it.
-- KEYS, ARGV and replies: connectors/scripts.py (this header is not sent to Redis).
local joined = redis.call('GET', KEYS[1])
local generation = joined and string.match(joined, ':(%d+)$') or redis.call('GET', KEYS[3]) or '0'
if generation ~= ARGV[3] then
  return {'moved', generation}
end
if joined then
  local sid = tonumber(redis.call('GET', KEYS[6]) or '0')
  if ARGV[2] == '1' and math.floor(sid / tonumber(ARGV[4])) == tonumber(string.match(joined, '^(%d+):')) then
    return {'published', joined}
  end
  return {'joined', joined}
end
local token = redis.call('INCR', KEYS[2])
if token > tonumber(redis.call('GET', KEYS[4]) or '0') then
  redis.call('SET', KEYS[4], token)
end
if ARGV[2] == '1' then
  redis.call('DEL', KEYS[5])
end
joined = token .. ':' .. generation
redis.call('SET', KEYS[1], joined, 'EX', ARGV[1])
return {'joined', joined}
