-- The activity flow's publish body: the workspaces' sorted sets and their slots.
-- KEYS, ARGV and replies: connectors/scripts.py (this header is not sent to Redis).
local full = ARGV[P] == 'full'
if full then
  redis.call('DEL', KEYS[9], KEYS[10])
  for k = 11, #KEYS do
    redis.call('UNLINK', KEYS[k])
  end
end
local a = P + 1
local W = tonumber(ARGV[a])
local names, slots, kept, emptied = {}, {}, {}, {}
for w = 1, W do
  names[w] = ARGV[a + w]
end
local direct = {}
if W > 0 then
  direct = cjson.decode(ARGV[a + W + 1])
end
if not full then
  for i = 1, W, 4000 do
    local got = redis.call('HMGET', KEYS[10], unpack(names, i, math.min(i + 3999, W)))
    for j = 1, #got do
      slots[i + j - 1] = got[j]
    end
  end
end
for w = 1, W do
  local za, zb = KEYS[9 + 2 * w], KEYS[10 + 2 * w]
  local z = za
  if slots[w] == 'b' then
    z = zb
  end
  if apply(z, direct[names[w]]) then
    kept[#kept + 1] = names[w]
  else
    emptied[#emptied + 1] = names[w]
    redis.call('UNLINK', za, zb)
  end
end
in_batches('SADD', KEYS[9], kept)
in_batches('SREM', KEYS[9], emptied)
in_batches('HDEL', KEYS[10], emptied)
local s = a + W + 2
local present, to_b, to_a = {}, {}, {}
for i = 1, tonumber(ARGV[s]) do
  local ws = ARGV[s + 2 * i - 1]
  present[#present + 1] = ws
  if ARGV[s + 2 * i] == 'b' then
    to_b[#to_b + 1] = ws
    to_b[#to_b + 1] = 'b'
  else
    to_a[#to_a + 1] = ws
  end
end
local g = s + 2 * tonumber(ARGV[s]) + 1
local gone = {}
for i = g + 1, g + tonumber(ARGV[g]) do
  gone[#gone + 1] = ARGV[i]
end
if not full then
  for k = 11 + 2 * W, #KEYS do
    redis.call('UNLINK', KEYS[k])
  end
end
in_batches('SADD', KEYS[9], present)
in_batches('HSET', KEYS[10], to_b)
in_batches('HDEL', KEYS[10], to_a)
in_batches('SREM', KEYS[9], gone)
in_batches('HDEL', KEYS[10], gone)
return 1
