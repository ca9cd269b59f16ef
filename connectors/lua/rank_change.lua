-- Rank change (docs/semantics/boards.md 5.5): positions gained since the board's previous change,
-- from the board now and the entries that moved at that change (state/board_moves.py's arithmetic):
--   rank then = before(board, k) - before(moved now, k) + before(moved then, k)
-- with k the entry's key then (its key now if it did not move). The publish script keeps a
-- board's moves beside it (connectors/scripts.py PUBLISH_BOARDS): the hash <board>:m (player ->
-- the score before, after reached_at's 6 bytes on `all`; '' for an entry new then), the sorted sets
-- <board>:mt and <board>:mn of the moved entries' keys then and now; the hash's field '' is the
-- snapshot id they were kept at, valid from the marker's (KEYS[8]) on.
-- Needs after_cursor (lua/board_pages.lua), id_of (lua/board_scores.lua). KEYS, ARGV: connectors/scripts.py.
local function before(z, s, m)
  -- the entries of z strictly before the key (score s, member m), a member of z or not
  local there = redis.call('ZSCORE', z, m)
  if there and tonumber(there) == tonumber(s) then
    return redis.call('ZRANK', z, m)
  end
  return after_cursor(z, s, m)
end
local function gained(z, player, s, m, rank0, bits)
  -- the positions gained by player (key now s, m; 0-based rank now rank0), '' if new then
  local was = redis.call('HGET', z .. ':m', player)
  local then0 = rank0
  if was then
    if was == '' then
      return ''
    end
    if bits then
      s, m = was, player
    else
      s, m = string.sub(was, 7), string.sub(was, 1, 6) .. player
    end
    then0 = before(z, s, m)
  end
  then0 = then0 - before(z .. ':mn', s, m) + before(z .. ':mt', s, m)
  return tostring(then0 - rank0)
end
local function rank_changes(z, flat, first0)
  -- per member, score pair of flat (ranks first0, first0 + 1, ...): its gain; false when rank
  -- change is off or the board has not changed since it was turned on
  local since = redis.call('GET', KEYS[8])
  local kept = since and redis.call('HGET', z .. ':m', '')
  if not kept or tonumber(kept) < tonumber(since) then
    return false
  end
  local out = {}
  local bits = time_bits(z)
  for i = 1, #flat, 2 do
    out[#out + 1] = gained(z, id_of(flat[i], bits), flat[i + 1], flat[i], first0 + (i - 1) / 2, bits)
  end
  return out
end
