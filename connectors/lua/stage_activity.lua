-- Writes part of a large activity snapshot where readers do not look.
-- KEYS, ARGV and replies: connectors/scripts.py (this header is not sent to Redis).
local budget, spent, reply, staged = tonumber(ARGV[4]), 0, {0}, {}
for i = 1, (#ARGV - 4) / 3 do
  local ws, how, changes = ARGV[2 + 3 * i], ARGV[3 + 3 * i], cjson.decode(ARGV[4 + 3 * i])
  local src, dst, slot = KEYS[3 + 2 * i], KEYS[4 + 2 * i], 'b'
  if slot_of(ws) == 'b' then
    src, dst, slot = dst, src, 'a'
  end
  local cost = 16
  for _ in pairs(changes) do
    cost = cost + 1
  end
  if how == 'copy' then
    cost = cost + redis.call('ZCARD', src)
  end
  if i > 1 and spent + cost > budget then
    break
  end
  spent = spent + cost
  staged[#staged + 1] = ws
  if how == 'copy' then
    if redis.call('COPY', src, dst, 'REPLACE') == 0 then
      redis.call('DEL', dst)
    end
  elseif how == 'fresh' then
    redis.call('DEL', dst)
  end
  reply[1] = i
  reply[i + 1] = {slot, apply(dst, changes) and 1 or 0}
end
in_batches('SADD', KEYS[4], staged)
return reply
