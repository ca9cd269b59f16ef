-- Frees the slot readers do not read of each workspace named.
-- KEYS, ARGV and replies: connectors/scripts.py (this header is not sent to Redis).
for i = 4, #ARGV do
  if slot_of(ARGV[i]) == 'b' then
    redis.call('UNLINK', KEYS[2 * i - 3])
  else
    redis.call('UNLINK', KEYS[2 * i - 2])
  end
  redis.call('SREM', KEYS[4], ARGV[i])
end
return 1
