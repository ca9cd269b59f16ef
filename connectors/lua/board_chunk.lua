-- The next chunk of a board, for a reader loading it in pieces.
-- KEYS, ARGV and replies: connectors/scripts.py (this header is not sent to Redis).
local start = 0
if #ARGV > 1 then
  start = nil
  for i = #ARGV - 1, 2, -2 do
    if redis.call('ZSCORE', KEYS[1], ARGV[i]) == ARGV[i + 1] then
      start = redis.call('ZRANK', KEYS[1], ARGV[i]) + 1
      break
    end
  end
  if not start then
    return false
  end
end
return redis.call('ZRANGE', KEYS[1], start, start + tonumber(ARGV[1]) - 1, 'WITHSCORES')
