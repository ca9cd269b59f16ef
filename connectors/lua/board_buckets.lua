-- A board's reached_at per player, in buckets (linear hashing, as board_layout.bucket_of):
-- the count key r holds the number of buckets n (absent: 1), bucket i is the hash r:i.
-- Callers send each player's CRC-32 (zlib's); only a split computes it here (crc32).
-- KEYS, ARGV: connectors/scripts.py (this header is not sent to Redis).
local band, bxor, rshift, byte = bit.band, bit.bxor, bit.rshift, string.byte
local crc_table
local function crc32(s)
  if not crc_table then
    crc_table = {}
    for i = 0, 255 do
      local c = i
      for _ = 1, 8 do
        if band(c, 1) == 1 then
          c = bxor(rshift(c, 1), 0xEDB88320)
        else
          c = rshift(c, 1)
        end
      end
      crc_table[i] = c
    end
  end
  local c = -1
  for i = 1, #s do
    c = bxor(crc_table[band(bxor(c, byte(s, i)), 0xFF)], rshift(c, 8))
  end
  c = bit.bnot(c)
  if c < 0 then
    c = c + 4294967296
  end
  return c
end
local function bucket_span(r)
  local n = tonumber(redis.call('GET', r) or '1')
  local low = 1
  while low * 2 <= n do
    low = low * 2
  end
  return n, low
end
local function bucket_key(r, h, n, low)
  local b = h % low
  if b < n - low then
    b = h % (2 * low)
  end
  return r .. ':' .. b
end
