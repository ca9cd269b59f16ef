-- Lua shared by the activity scripts: a workspace's slot, commands in pieces, applying changes.
-- KEYS, ARGV and replies: connectors/scripts.py (this header is not sent to Redis).
local function slot_of(ws)
  if redis.call('HGET', KEYS[SLOTS], ws) == 'b' then
    return 'b'
  end
  return 'a'
end
local function in_batches(command, key, list)
  for i = 1, #list, 4000 do
    redis.call(command, key, unpack(list, i, math.min(i + 3999, #list)))
  end
end
local function apply(z, changes)
  local adds, removes = {}, {}
  for channel, count in pairs(changes) do
    if count > 0 then
      adds[#adds + 1] = count
      adds[#adds + 1] = channel
    else
      removes[#removes + 1] = channel
    end
  end
  in_batches('ZADD', z, adds)
  in_batches('ZREM', z, removes)
  if #removes == 0 and #adds > 0 then
    return true
  end
  return redis.call('EXISTS', z) == 1
end
