-- Rank change since the day's start (docs/semantics/boards.md 5.6), the publish side, only for a
-- --rank-change run: per game the snapshot whose input made its newest daily period D current,
-- and per board the entries that moved since the snapshot stored before it (the day start).
-- The hash <marker>:day: game -> 'F DS' (F that snapshot's id, DS the id stored before it, '' if
-- none). Per board the hash <board>:dm (player -> its key at the day start as :m holds keys, ''
-- for an entry new since), the sorted sets <board>:dt (those keys, of the entries on the board
-- then) and <board>:dn (their keys now); the hash's field '' is F. A board's moves of an older day
-- go at its first change of the new one; until then readers take it as unchanged since the day start.
-- KEYS, ARGV: connectors/scripts.py PUBLISH_BOARDS (this header is not sent to Redis).
local function new_day(day, game, periods)
  -- before the game's aliases take `periods`: a new D makes this snapshot its day's first
  local old = redis.call('HGET', KEYS[9], game)
  if not old or cjson.decode(old)[1] ~= cjson.decode(periods)[1] then
    redis.call('HSET', day, game, ARGV[3] .. ' ' .. (previous or ''))
  end
end
local function day_moves(z, day, from, name, mv, mt, mn)
  -- a board's moves of this snapshot (publish_boards.lua's mv, mt and mn) added to its day's, when
  -- its game's day start is known since rank change is kept (`from`, the marker's id)
  local first = string.match(redis.call('HGET', day, cjson.decode(name)[1]) or '', '^(%d+) ')
  if not first or tonumber(first) < from then
    return
  end
  local dm, dt, dn = z .. ':dm', z .. ':dt', z .. ':dn'
  if redis.call('HGET', dm, '') ~= first then
    redis.call('UNLINK', dm, dt, dn)
    redis.call('HSET', dm, '', first)
  end
  local adds, removes, starts = {}, {}, {}
  local t = 1
  for i = 1, #mv, 2 do
    local player, key = mv[i], mv[i + 1]
    local old = key ~= '' and mt[t + 1] or false  -- the entry's member before this snapshot
    if redis.call('HSETNX', dm, player, key) == 1 then
      if old then
        starts[#starts + 1], starts[#starts + 2] = mt[t], old
      end
    elseif old and old ~= mn[i + 1] then
      removes[#removes + 1] = old
    end
    if old then
      t = t + 2
    end
    adds[#adds + 1], adds[#adds + 2] = mn[i], mn[i + 1]
  end
  for i = 1, #starts, 4000 do
    redis.call('ZADD', dt, unpack(starts, i, math.min(i + 3999, #starts)))
  end
  for i = 1, #removes, 4000 do
    redis.call('ZREM', dn, unpack(removes, i, math.min(i + 3999, #removes)))
  end
  for i = 1, #adds, 4000 do
    redis.call('ZADD', dn, unpack(adds, i, math.min(i + 3999, #adds)))
  end
end
