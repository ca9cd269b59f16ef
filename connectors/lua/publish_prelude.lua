-- The part of every publish script that decides whether a snapshot is stored.
-- KEYS, ARGV and replies: connectors/scripts.py (this header is not sent to Redis).
local gen = redis.call('GET', KEYS[1])
if ARGV[6] == 'live' then
  if not gen then
    redis.call('SET', KEYS[1], ARGV[2])
  elseif gen ~= ARGV[2] then
    return redis.error_reply('SWITCHED generation ' .. ARGV[2] .. ' was replaced by generation ' .. gen)
  end
end
local token = tonumber(ARGV[1])
local owner = tonumber(redis.call('GET', KEYS[2]) or '0')
if token < owner then
  return redis.error_reply('FENCED run ' .. ARGV[1] .. ' is not the owner; current owner is run ' .. owner)
end
if token > owner then
  redis.call('SET', KEYS[2], ARGV[1])
end
if tonumber(redis.call('GET', KEYS[7]) or '0') < token then
  redis.call('SET', KEYS[7], ARGV[1])
end
local F = 9 + 2 * tonumber(ARGV[7])
local P = F + 1 + 2 * tonumber(ARGV[F])
local previous = redis.call('GET', KEYS[3])
if ARGV[P] ~= 'full' and not previous then
  return -2
end
local function is_stored()
  if ARGV[3] ~= previous or redis.call('HLEN', KEYS[5]) ~= tonumber(ARGV[7]) then
    return false
  end
  for i = 9, F - 1, 2 do
    if redis.call('HGET', KEYS[5], ARGV[i]) ~= ARGV[i + 1] then
      return false
    end
  end
  return true
end
if tonumber(ARGV[3]) <= tonumber(previous or '-1') then
  if is_stored() then
    return 0
  end
  return -3
end
for i = 9, F - 1, 2 do
  local stored = tonumber(redis.call('HGET', KEYS[5], ARGV[i]) or '-1')
  if tonumber(ARGV[i + 1]) < stored then
    return -1
  end
end
if ARGV[P] ~= 'full' then
  for i = F + 1, P - 1, 2 do
    if tonumber(redis.call('HGET', KEYS[5], ARGV[i]) or '-1') < tonumber(ARGV[i + 1]) then
      return -4
    end
  end
end
for i = 9, F - 1, 2 do
  redis.call('HSET', KEYS[5], ARGV[i], ARGV[i + 1])
end
redis.call('SET', KEYS[3], ARGV[3])
redis.call('SET', KEYS[4], ARGV[4])
redis.call('SET', KEYS[8], ARGV[8])  -- when it was published: readers answer it with the id, atomically
redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[5], '*', 'snapshot_id', ARGV[3], 'snapshot', ARGV[4])
if (gen or (ARGV[6] == 'live' and ARGV[2]) or '0') == ARGV[2] then
  redis.pcall('PUBLISH', KEYS[1], ARGV[2] .. ':' .. ARGV[3])  -- an ACL without the channel only costs readers the wake-up
end
