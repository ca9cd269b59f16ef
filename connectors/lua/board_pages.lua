-- What pages, tie styles and percentiles read of a board (docs/semantics/boards.md 5):
-- a cursor's place, the distinct scores above a score, the n-th distinct score.
-- A board's scores ascend from the best (lua/board_scores.lua: bits, a points group); the entries of
-- one score order by member bytes.
-- KEYS, ARGV: connectors/scripts.py (this header is not sent to Redis).
local function bytes_le(a, b)
  -- byte-wise a <= b (Lua's < on strings follows the server's locale)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a <= #b
end
local function after_cursor(board, neg, m)
  -- how many entries come before or at the entry (score -neg, member m), on the board or not
  local there = redis.call('ZSCORE', board, m)
  if there and tonumber(there) == tonumber(neg) then
    return redis.call('ZRANK', board, m) + 1
  end
  local better = redis.call('ZCOUNT', board, '-inf', '(' .. neg)
  local lo, hi = 0, redis.call('ZCOUNT', board, neg, neg)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if bytes_le(redis.call('ZRANGE', board, better + mid, better + mid)[1], m) then
      lo = mid + 1
    else
      hi = mid
    end
  end
  return better + lo
end
local function distinct_above(board, neg, bits)
  -- the distinct points better than those of score neg: one step per distinct points
  local count = 0
  local floor = tonumber(group_of(neg, bits))
  local head = redis.call('ZRANGE', board, 0, 0, 'WITHSCORES')
  local s = head[2]
  while s and tonumber(s) < floor do
    count = count + 1
    s = redis.call('ZRANGEBYSCORE', board, after_group(s, bits), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)[2]
  end
  return count
end
local function nth_distinct(board, k, bits)
  -- a score of the k-th distinct points from the best (the last one if there are fewer)
  local s = redis.call('ZRANGE', board, 0, 0, 'WITHSCORES')[2]
  for _ = 2, k do
    local nxt = redis.call('ZRANGEBYSCORE', board, after_group(s, bits), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)[2]
    if not nxt then
      break
    end
    s = nxt
  end
  return s
end
local function page_at(board, start, n, dense, bits)
  -- entries start .. start + n - 1 (0-based) as around replies them, and with dense the
  -- distinct points above the first
  local items = redis.call('ZRANGE', board, start, start + n - 1, 'WITHSCORES')
  if #items == 0 then
    return {start, 0, items, 0}
  end
  local out = {start, redis.call('ZCOUNT', board, '-inf', '(' .. group_of(items[2], bits)), items}
  if dense then
    out[4] = distinct_above(board, items[2], bits)
  end
  return out
end
