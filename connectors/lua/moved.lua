-- The start of every read script: replies {'moved', current} unless ARGV[1] is the current
-- generation (KEYS[1] its pointer), which it leaves in g. KEYS, ARGV: connectors/scripts.py (header not sent).
local g = redis.call('GET', KEYS[1]) or '0'
if g ~= ARGV[1] then
  return {'moved', g}
end
