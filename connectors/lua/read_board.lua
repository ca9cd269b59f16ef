-- One board query.
-- KEYS, ARGV and replies: connectors/scripts.py (this header is not sent to Redis).
local layout = redis.call('GET', KEYS[6])
if layout ~= ARGV[8] and redis.call('EXISTS', KEYS[2]) == 1 then
  return {'layout', layout or '1'}
end
if ARGV[2] ~= '' then
  local periods = redis.call('HGET', KEYS[3], ARGV[7])
  local resolved = ''
  if periods then
    local p = cjson.decode(periods)
    local name = p[ARGV[2] == 'daily' and 1 or 2]
    if name ~= cjson.null then
      resolved = ARGV[2] .. ':' .. name
    end
  end
  if resolved ~= ARGV[3] then
    return {'alias', resolved}
  end
end
local sid = redis.call('GET', KEYS[2]) or ''
local at = redis.call('GET', KEYS[7]) or ''  -- when that snapshot was published (stored with it)
local card = redis.call('ZCARD', KEYS[4])
if card == 0 then
  return {'board', sid, at, 0}
end
if ARGV[4] ~= 'at' then  -- rank change's basis (lua/rank_change.lua)
  local refused = choose_basis(KEYS[4], ARGV[7], ARGV[13])
  if refused then
    return refused
  end
end
local function paged(answer)
  -- an answer of items (top's flat pairs, or {start, better, flat, ...}), their rank changes and their basis
  if answer[1] and type(answer[1]) == 'number' then
    return {'board', sid, at, card, answer, rank_changes(KEYS[4], answer[3], answer[1]), basis_id}
  end
  return {'board', sid, at, card, answer, rank_changes(KEYS[4], answer, 0), basis_id}
end
if ARGV[4] == 'top' then
  return paged(redis.call('ZRANGE', KEYS[4], 0, tonumber(ARGV[5]) - 1, 'WITHSCORES'))
end
local dense = ARGV[10] == 'dense'
local bits = time_bits(KEYS[4])  -- nil on `all`: members and buckets (lua/board_scores.lua)
if ARGV[4] == 'after' then
  return paged(page_at(KEYS[4], after_cursor(KEYS[4], ARGV[11], ARGV[12]), tonumber(ARGV[5]), dense, bits))
end
if ARGV[4] == 'at' then  -- the score at a percentile: ARGV[5] in hundredths of a percent
  local above = card * (10000 - tonumber(ARGV[5]))
  local r = (above - above % 10000) / 10000
  if r < 1 then
    return {'board', sid, at, card, false}
  end
  if dense then
    return {'board', sid, at, card, {r, nth_distinct(KEYS[4], r, bits)}}
  end
  return {'board', sid, at, card, {r, redis.call('ZRANGE', KEYS[4], r - 1, r - 1, 'WITHSCORES')[2]}}
end
local n, low = bucket_span(KEYS[5])
local function member_of(player, hash)
  -- player's member on the board, nil if they are not on it
  if bits then
    return player
  end
  local reached = redis.call('HGET', bucket_key(KEYS[5], hash, n, low), player)
  return reached and reached .. player
end
if ARGV[4] == 'ranks' then  -- scoped ranks: a player and its CRC-32 per pair of arguments after the fixed thirteen
  local found, changes = {}, basis and {}  -- changes: per player on the board its gain (rank change kept)
  for i = 14, #ARGV - 1, 2 do
    local m = member_of(ARGV[i], tonumber(ARGV[i + 1]))
    local score = m and redis.call('ZSCORE', KEYS[4], m)
    if score then
      local rank = redis.call('ZRANK', KEYS[4], m)
      found[#found + 1] = {score, rank, redis.call('ZCOUNT', KEYS[4], '-inf', '(' .. group_of(score, bits))}
      if dense then
        found[#found][4] = distinct_above(KEYS[4], score, bits)
      end
      if changes then
        changes[#changes + 1] = rank_changes(KEYS[4], {m, score}, rank)[1]
      end
    else
      found[#found + 1] = false
    end
  end
  return {'board', sid, at, card, found, changes, basis_id}
end
local m = member_of(ARGV[6], tonumber(ARGV[9]))
local score = m and redis.call('ZSCORE', KEYS[4], m)
if not score then
  return {'board', sid, at, card, false}
end
local rank = redis.call('ZRANK', KEYS[4], m)
if ARGV[4] == 'player' then
  local answer = {score, rank, redis.call('ZCOUNT', KEYS[4], '-inf', '(' .. group_of(score, bits))}
  if dense then
    answer[4] = distinct_above(KEYS[4], score, bits)
  end
  return {'board', sid, at, card, answer, rank_changes(KEYS[4], {m, score}, rank), basis_id}
end
if ARGV[4] == 'page' then
  local n = tonumber(ARGV[5])
  return paged(page_at(KEYS[4], rank - rank % n, n, dense, bits))
end
local start = math.max(0, rank - tonumber(ARGV[5]))
if dense then
  return paged(page_at(KEYS[4], start, rank + tonumber(ARGV[5]) - start + 1, true, bits))
end
local items = redis.call('ZRANGE', KEYS[4], start, rank + tonumber(ARGV[5]), 'WITHSCORES')
return paged({start, redis.call('ZCOUNT', KEYS[4], '-inf', '(' .. group_of(items[2], bits)), items})
