-- Before the publish prelude writes anything: the generation's boards are in this layout.
-- LAYOUT is the index of the layout key in KEYS. KEYS, ARGV: connectors/scripts.py (header not sent).
local layout = redis.call('GET', KEYS[LAYOUT])
local floor_at = 9 + 2 * tonumber(ARGV[7])  -- the prelude's F; ARGV[P + 1] is the layout
local wanted = ARGV[floor_at + 2 + 2 * tonumber(ARGV[floor_at])]
if layout ~= wanted then
  if redis.call('EXISTS', KEYS[3]) == 1 then
    return redis.error_reply('LAYOUT the boards of generation ' .. ARGV[2] .. ' are in layout ' ..
                             (layout or '1') .. ', this rankflow writes layout ' .. wanted)
  end
  redis.call('SET', KEYS[LAYOUT], wanted)
end
