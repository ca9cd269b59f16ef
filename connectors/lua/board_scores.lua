-- How a board's scores order (connectors/board_layout.py): on `all` a score is -points and the member
-- reached_at's 6 bytes then the id; on best, daily:* and weekly:* the member is the id and the score the
-- double whose bit pattern is the order key (points' complement, then `bits` bits of reached_at), so the
-- entries of one points value are the keys of one run of high bits: a points group.
-- Lua's own number to text keeps 14 digits: a score computed here goes out through as_text.
-- KEYS, ARGV: connectors/scripts.py (this header is not sent to Redis).
local function time_bits(z)
  -- the bits of reached_at in the key of board z (its sorted set's key), nil on `all`
  if string.sub(z, -5) == ':best' then
    return 48
  end
  if string.find(z, ':daily:%d%d%d%d%-%d%d%-%d%d$') then
    return 27
  end
  if string.find(z, ':weekly:%d%d%d%d%-W%d%d$') then
    return 30
  end
  return nil
end
local function as_text(hi, lo)
  return string.format('%.17g', (struct.unpack('>d', struct.pack('>I4I4', hi, lo))))
end
local function group_of(s, bits)
  -- the least score of s's points group (s itself on `all`)
  if not bits then
    return s
  end
  local hi, lo = struct.unpack('>I4I4', struct.pack('>d', tonumber(s)))
  if bits >= 32 then
    return as_text(hi - hi % 2 ^ (bits - 32), 0)
  end
  return as_text(hi, lo - lo % 2 ^ bits)
end
local function after_group(s, bits)
  -- a ZRANGEBYSCORE min past every score of s's points group
  if not bits then
    return '(' .. s
  end
  local hi, lo = struct.unpack('>I4I4', struct.pack('>d', tonumber(s)))
  if bits >= 32 then
    return as_text(hi - hi % 2 ^ (bits - 32) + 2 ^ (bits - 32), 0)
  end
  lo = lo - lo % 2 ^ bits + 2 ^ bits
  if lo >= 4294967296 then
    hi, lo = hi + 1, lo - 4294967296
  end
  return as_text(hi, lo)
end
local function id_of(m, bits)
  -- the player id of member m
  if bits then
    return m
  end
  return string.sub(m, 7)
end
