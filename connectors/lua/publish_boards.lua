-- The boards flow's publish body: the boards, the aliases, the board_changes stream.
-- KEYS, ARGV and replies: connectors/scripts.py (this header is not sent to Redis).
local boards = tonumber(ARGV[P + 4])
local dropped = tonumber(ARGV[P + 5])
-- Rank change (lua/rank_change.lua): a --rank-change run keeps each changed board's moves, with
-- the snapshot id they were kept at; the marker says since when they are kept (moves older than
-- it are an earlier run's, the board may have changed since without them).
local track = ARGV[P + 6] == '1'
local marker = KEYS[#KEYS]
local day, from = marker .. ':day', nil  -- the games' day starts (lua/day_moves.lua)
if track then
  redis.call('SET', marker, ARGV[3], 'NX')
  from = tonumber(redis.call('GET', marker))
else
  redis.call('DEL', marker)
end
local a = P + 9
local size = 0
local aliases = {}
local function in_batches(command, key, list)
  for i = 1, #list, 4000 do
    redis.call(command, key, unpack(list, i, math.min(i + 3999, #list)))
  end
end
local function grow(z, r, coming)
  -- Before a board takes `coming` entries: one bucket more while its players and those could
  -- average more than LOAD per bucket (split bucket n - low), so no bucket outgrows a listpack.
  local n, low = bucket_span(r)
  local before = n
  local card = redis.call('ZCARD', z) + coming
  while card > LOAD * n do
    local split = n - low
    local from, to = r .. ':' .. split, r .. ':' .. (split + low)
    local flat = redis.call('HGETALL', from)
    local moved, gone = {}, {}
    for i = 1, #flat, 2 do
      if crc32(flat[i]) % (2 * low) == split + low then
        moved[#moved + 1], moved[#moved + 2] = flat[i], flat[i + 1]
        gone[#gone + 1] = flat[i]
      end
    end
    if #gone > 0 then
      redis.call('HSET', to, unpack(moved))
      redis.call('HDEL', from, unpack(gone))
    end
    n = n + 1
    if n == 2 * low then
      low = 2 * low
    end
  end
  if n ~= before then
    redis.call('SET', r, n)
  end
  return n, low
end
for i = 1, tonumber(ARGV[a]) do
  if track then
    new_day(day, ARGV[a + 2 * i - 1], ARGV[a + 2 * i])
  end
  redis.call('HSET', KEYS[9], ARGV[a + 2 * i - 1], ARGV[a + 2 * i])
  aliases[2 * i - 1], aliases[2 * i] = ARGV[a + 2 * i - 1], ARGV[a + 2 * i]
end
a = a + 1 + 2 * tonumber(ARGV[a])
local hashes = cjson.decode(ARGV[a])
a = a + 1
local changed = {}
for b = 1, boards do
  local z, r = KEYS[11 + 2 * b], KEYS[12 + 2 * b]
  redis.call('SADD', KEYS[10], ARGV[a])
  changed[2 * b - 1], changed[2 * b] = ARGV[a], ARGV[a + 1]
  size = size + #ARGV[a + 1]
  local mv, mt, mn = {}, {}, {}  -- with track: the moved entries, their keys before and now
  if ARGV[a + 3] ~= '' then  -- keyed (best, a period): the ids' scores, the order keys (board_layout.KeyedBoard)
    local adds = {}
    for player, s in pairs(cjson.decode(ARGV[a + 3])) do
      if track then
        local was = redis.call('ZSCORE', z, player)
        if not was then
          mv[#mv + 1], mv[#mv + 2] = player, ''
          mn[#mn + 1], mn[#mn + 2] = s, player
        elseif tonumber(was) ~= s then
          mv[#mv + 1], mv[#mv + 2] = player, was
          mt[#mt + 1], mt[#mt + 2] = was, player
          mn[#mn + 1], mn[#mn + 2] = s, player
        end
      end
      adds[#adds + 1], adds[#adds + 2] = s, player
    end
    in_batches('ZADD', z, adds)
  else  -- all: members of reached_at's 6 bytes and the id, found through the buckets
    local n, low = grow(z, r, tonumber(ARGV[a + 2]))
    local adds, removes = {}, {}
    for player, e in pairs(cjson.decode(ARGV[a + 1])) do
      local at = struct.pack('>I6', e[2])
      local bucket = bucket_key(r, hashes[player], n, low)
      local old = redis.call('HGET', bucket, player)
      if track then
        if not old then
          mv[#mv + 1], mv[#mv + 2] = player, ''
          mn[#mn + 1], mn[#mn + 2] = -e[1], at .. player
        else
          local was = redis.call('ZSCORE', z, old .. player)
          if old ~= at or tonumber(was) ~= -e[1] then
            mv[#mv + 1], mv[#mv + 2] = player, old .. was
            mt[#mt + 1], mt[#mt + 2] = was, old .. player
            mn[#mn + 1], mn[#mn + 2] = -e[1], at .. player
          end
        end
      end
      if old ~= at then
        if old then
          removes[#removes + 1] = old .. player
        end
        redis.call('HSET', bucket, player, at)
      end
      adds[#adds + 1], adds[#adds + 2] = -e[1], at .. player
    end
    in_batches('ZREM', z, removes)
    in_batches('ZADD', z, adds)
  end
  if #mv > 0 then  -- the board changed: these moves replace its last change's
    redis.call('UNLINK', z .. ':m', z .. ':mt', z .. ':mn')
    day_moves(z, day, from, ARGV[a], mv, mt, mn)
    mv[#mv + 1], mv[#mv + 2] = '', ARGV[3] .. ' ' .. (previous or '')  -- no player id is empty
    in_batches('HSET', z .. ':m', mv)
    in_batches('ZADD', z .. ':mt', mt)
    in_batches('ZADD', z .. ':mn', mn)
  end
  a = a + 4
end
local gone = {}
for d = 1, dropped do
  local k = 11 + 2 * boards + 2 * d
  local n = bucket_span(KEYS[k + 1])
  local buckets = {}
  for i = 0, n - 1 do
    buckets[#buckets + 1] = KEYS[k + 1] .. ':' .. i
  end
  in_batches('UNLINK', KEYS[k], buckets)
  redis.call('UNLINK', KEYS[k + 1], KEYS[k] .. ':m', KEYS[k] .. ':mt', KEYS[k] .. ':mn',
             KEYS[k] .. ':dm', KEYS[k] .. ':dt', KEYS[k] .. ':dn')
  redis.call('SREM', KEYS[10], ARGV[a])
  gone[d] = ARGV[a]
  a = a + 1
end
for _, name in ipairs(keep_finals(13 + 2 * boards + 2 * dropped, a, tonumber(ARGV[P + 7]), tonumber(ARGV[P + 8]),
                                  KEYS[#KEYS - 1])) do
  gone[#gone + 1] = name
end
if ARGV[P] == 'full' or size > tonumber(ARGV[P + 3]) then
  redis.call('XADD', KEYS[11], 'MAXLEN', '~', ARGV[P + 2], '*', 'snapshot_id', ARGV[3], 'published_at', ARGV[8],
             'previous', previous or '',
             'full', ARGV[P] == 'full' and 'full' or 'large')
else
  redis.call('XADD', KEYS[11], 'MAXLEN', '~', ARGV[P + 2], '*', 'snapshot_id', ARGV[3], 'published_at', ARGV[8],
             'previous', previous or '',
             'full', 'delta', 'aliases', #aliases > 0 and cjson.encode(aliases) or '[]',
             'boards', '[' .. table.concat(changed, ',') .. ']', 'dropped', '[' .. table.concat(gone, ',') .. ']')
end
return 1
