-- Rank change (docs/semantics/boards.md 5.5, 5.6): positions gained since a basis, from the board
-- now and the entries that moved since it (state/board_moves.py's arithmetic):
--   rank then = before(board, k) - before(moved now, k) + before(moved then, k)
-- with k the entry's key then (its key now if it did not move). The publish script keeps a
-- board's moves beside it (connectors/scripts.py PUBLISH_BOARDS): since its previous change the
-- hash <board>:m (player -> the score before, after reached_at's 6 bytes on `all`; '' for an entry
-- new then), the sorted sets <board>:mt and <board>:mn of the moved entries' keys then and now, the
-- hash's field '' the snapshot id they were kept at and the one stored before it (the basis); since
-- the day start the same three as :dm, :dt, :dn (lua/day_moves.lua). Moves are valid from the
-- marker's (KEYS[8]) snapshot id on.
-- Needs after_cursor (lua/board_pages.lua), id_of (lua/board_scores.lua). KEYS, ARGV: connectors/scripts.py.
local function before(z, s, m)
  -- the entries of z strictly before the key (score s, member m), a member of z or not
  local there = redis.call('ZSCORE', z, m)
  if there and tonumber(there) == tonumber(s) then
    return redis.call('ZRANK', z, m)
  end
  return after_cursor(z, s, m)
end
local LAST, DAY = {':m', ':mt', ':mn'}, {':dm', ':dt', ':dn'}
local basis, basis_id = false, false  -- the moves that answer, or 'same' (none since), or false: no rank_change
local function gained(z, player, s, m, rank0, bits)
  -- the positions gained by player (key now s, m; 0-based rank now rank0), '' if new then
  if basis == 'same' then
    return '0'
  end
  local was = redis.call('HGET', z .. basis[1], player)
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
  then0 = then0 - before(z .. basis[3], s, m) + before(z .. basis[2], s, m)
  return tostring(then0 - rank0)
end
local function choose_basis(z, game, since)
  -- basis for `since` ('' the board's previous change, 'day' the day start, or a snapshot id);
  -- nil, or the refusal {'since', previous change's basis, day start, marker} ('' each: not kept)
  local marker = tonumber(redis.call('GET', KEYS[8]) or '')
  local kept = marker and redis.call('HGET', z .. ':m', '')
  local c, b = string.match(kept or '', '^(%d+) ?(%d*)$')
  local last = c and tonumber(c) >= marker
  if since == '' then
    basis = last and LAST
    return nil
  end
  local f, ds = string.match(marker and redis.call('HGET', KEYS[8] .. ':day', game) or '', '^(%d+) (%d*)$')
  local day = f and tonumber(f) >= marker
  if day and (since == 'day' or (ds ~= '' and since == ds)) then
    basis, basis_id = redis.call('HGET', z .. ':dm', '') == f and DAY or 'same', ds
  elseif last and b ~= '' and since == b then
    basis, basis_id = LAST, b
  else
    return {'since', last and b or '', day and ('day ' .. ds) or '', marker and tostring(marker) or ''}
  end
  return nil
end
local function rank_changes(z, flat, first0)
  -- per member, score pair of flat (ranks first0, first0 + 1, ...): its gain; false when there is
  -- no basis (rank change off, or the board has not changed since it was turned on)
  if not basis then
    return false
  end
  local out = {}
  local bits = time_bits(z)
  for i = 1, #flat, 2 do
    out[#out + 1] = gained(z, id_of(flat[i], bits), flat[i + 1], flat[i], first0 + (i - 1) / 2, bits)
  end
  return out
end
