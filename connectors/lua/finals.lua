-- Final standings (docs/semantics/boards.md 9): the periods retention drops become finals.
-- KEYS, ARGV: connectors/scripts.py (this header is not sent to Redis).
-- keep_finals(k, a, closed, expired, finals): from KEYS[k], per closed period its sorted set and
-- reached_at count key, then its final's two; per expired final its two. From ARGV[a], per closed
-- period its name (JSON [game, board]), its final's name and what the finals hash holds of it (JSON,
-- without the player count, added here); per expired final its name. The closed board's keys are
-- renamed (O(1) each, whatever its size): the final is the board as this snapshot leaves it.
-- Returns the closed boards' names: they leave the live boards like a dropped one.
local function keep_finals(k, a, closed, expired, finals)
  local gone = {}
  for _ = 1, closed do
    local z, r, fz, fr = KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3]
    local card = redis.call('ZCARD', z)
    if card > 0 then
      local n = bucket_span(r)
      for i = 0, n - 1 do
        if redis.call('EXISTS', r .. ':' .. i) == 1 then
          redis.call('RENAME', r .. ':' .. i, fr .. ':' .. i)
        end
      end
      redis.call('RENAME', z, fz)
      if redis.call('EXISTS', r) == 1 then
        redis.call('RENAME', r, fr)
      end
      redis.call('HSET', finals, ARGV[a + 1], string.sub(ARGV[a + 2], 1, -2) .. ',"players":' .. card .. '}')
    end
    redis.call('UNLINK', z .. ':m', z .. ':mt', z .. ':mn', z .. ':dm', z .. ':dt', z .. ':dn')
    redis.call('SREM', KEYS[10], ARGV[a])
    gone[#gone + 1] = ARGV[a]
    k, a = k + 4, a + 3
  end
  for _ = 1, expired do
    local fz, fr = KEYS[k], KEYS[k + 1]
    local n = bucket_span(fr)
    for i = 0, n - 1 do
      redis.call('UNLINK', fr .. ':' .. i)
    end
    redis.call('UNLINK', fz, fr)
    redis.call('HDEL', finals, ARGV[a])
    k, a = k + 2, a + 1
  end
  return gone
end
