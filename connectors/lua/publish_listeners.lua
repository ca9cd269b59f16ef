-- The listener flow's publish body: the count table and its changes stream.
-- KEYS, ARGV and replies: connectors/scripts.py (this header is not sent to Redis).
if ARGV[P] == 'full' then
  redis.call('DEL', KEYS[9])
end
for song, count in pairs(cjson.decode(ARGV[P + 1])) do
  if count > 0 then
    redis.call('ZADD', KEYS[9], count, song)
  else
    redis.call('ZREM', KEYS[9], song)
  end
end
redis.call('XADD', KEYS[10], 'MAXLEN', '~', ARGV[P + 2], '*', 'snapshot_id', ARGV[3], 'previous', previous or '',
           'full', ARGV[P], 'counts', ARGV[P + 1])
return 1
