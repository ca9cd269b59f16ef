-- The boards flow's publish body: the boards, the aliases, the board_changes stream.
-- KEYS, ARGV and replies: connectors/scripts.py (this header is not sent to Redis).
local boards = tonumber(ARGV[P + 3])
local dropped = tonumber(ARGV[P + 4])
local a = P + 5
local size = 0
local aliases = {}
for i = 1, tonumber(ARGV[a]) do
  redis.call('HSET', KEYS[8], ARGV[a + 2 * i - 1], ARGV[a + 2 * i])
  aliases[2 * i - 1], aliases[2 * i] = ARGV[a + 2 * i - 1], ARGV[a + 2 * i]
end
a = a + 1 + 2 * tonumber(ARGV[a])
local changed = {}
for b = 1, boards do
  local z, r = KEYS[9 + 2 * b], KEYS[10 + 2 * b]
  redis.call('SADD', KEYS[9], ARGV[a])
  changed[2 * b - 1], changed[2 * b] = ARGV[a], ARGV[a + 1]
  size = size + #ARGV[a + 1]
  for player, e in pairs(cjson.decode(ARGV[a + 1])) do
    local at = string.format('%015d', e[2])
    local old = redis.call('HGET', r, player)
    if old ~= at then
      if old then
        redis.call('ZREM', z, old .. player)
      end
      redis.call('HSET', r, player, at)
    end
    redis.call('ZADD', z, -e[1], at .. player)
  end
  a = a + 2
end
local gone = {}
for d = 1, dropped do
  local k = 9 + 2 * boards + 2 * d
  redis.call('DEL', KEYS[k], KEYS[k + 1])
  redis.call('SREM', KEYS[9], ARGV[a])
  gone[d] = ARGV[a]
  a = a + 1
end
if ARGV[P] == 'full' or size > tonumber(ARGV[P + 2]) then
  redis.call('XADD', KEYS[10], 'MAXLEN', '~', ARGV[P + 1], '*', 'snapshot_id', ARGV[3], 'previous', previous or '',
             'full', ARGV[P] == 'full' and 'full' or 'large')
else
  redis.call('XADD', KEYS[10], 'MAXLEN', '~', ARGV[P + 1], '*', 'snapshot_id', ARGV[3], 'previous', previous or '',
             'full', 'delta', 'aliases', #aliases > 0 and cjson.encode(aliases) or '[]',
             'boards', '[' .. table.concat(changed, ',') .. ']', 'dropped', '[' .. table.concat(gone, ',') .. ']')
end
return 1
