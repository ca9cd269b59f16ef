"""The Lua scripts that read and write a namespace atomically, with their contracts.

Each script is one atomic step in Redis; the Python around it (``redis_generations``,
``redis_publish``, ``api.store``) only builds its ``KEYS`` and ``ARGV`` and reads its
reply. Key names are in ``redis_keys``.

Every key a script touches is passed in ``KEYS``: Redis Cluster routes a script by
its keys and refuses one that reaches others (``tests/test_script_keys.py`` checks
it). A script whose keys depend on the current generation therefore gets the keys
of the generation the caller read, checks that it is still current, and otherwise
answers ``MOVED`` with the current one so the caller calls again.
"""

from __future__ import annotations

from enum import IntEnum

MOVED = b"moved"
"""The first element of a reply asking the caller to call again with another
generation's keys."""

MOVES = 3
"""How often a caller follows ``MOVED`` before giving up: a generation changes once
per rebuild, so one more call is almost always enough."""

PUBLISHED = b"published"
"""The first element of ``JOIN_LUA``'s refusal of a fresh process."""

PUBLISH_LUA = """
local gen = redis.call('GET', KEYS[1])
if ARGV[6] == 'live' then
  if not gen then
    redis.call('SET', KEYS[1], ARGV[2])
  elseif gen ~= ARGV[2] then
    return redis.error_reply('SWITCHED generation ' .. ARGV[2] .. ' was replaced by generation ' .. gen)
  end
end
local token = tonumber(ARGV[1])
local owner = tonumber(redis.call('GET', KEYS[2]) or '0')
if token < owner then
  return redis.error_reply('FENCED run ' .. ARGV[1] .. ' is not the owner; current owner is run ' .. owner)
end
if token > owner then
  redis.call('SET', KEYS[2], ARGV[1])
end
if tonumber(redis.call('GET', KEYS[9]) or '0') < token then
  redis.call('SET', KEYS[9], ARGV[1])
end
local counts_at = 9 + 2 * tonumber(ARGV[8])
local previous = redis.call('GET', KEYS[3])
if ARGV[counts_at] ~= 'full' and not previous then
  return -2
end
local function is_stored()
  if ARGV[3] ~= previous or redis.call('HLEN', KEYS[5]) ~= tonumber(ARGV[8]) then
    return false
  end
  for i = 9, counts_at - 1, 2 do
    if redis.call('HGET', KEYS[5], ARGV[i]) ~= ARGV[i + 1] then
      return false
    end
  end
  return true
end
if tonumber(ARGV[3]) <= tonumber(previous or '-1') then
  if is_stored() then
    return 0
  end
  return -3
end
for i = 9, counts_at - 1, 2 do
  local stored = tonumber(redis.call('HGET', KEYS[5], ARGV[i]) or '-1')
  if tonumber(ARGV[i + 1]) < stored then
    return -1
  end
end
for i = 9, counts_at - 1, 2 do
  redis.call('HSET', KEYS[5], ARGV[i], ARGV[i + 1])
end
if ARGV[counts_at] == 'full' then
  redis.call('DEL', KEYS[7])
end
for song, count in pairs(cjson.decode(ARGV[counts_at + 1])) do
  if count > 0 then
    redis.call('ZADD', KEYS[7], count, song)
  else
    redis.call('ZREM', KEYS[7], song)
  end
end
redis.call('SET', KEYS[3], ARGV[3])
redis.call('SET', KEYS[4], ARGV[4])
redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[5], '*', 'snapshot_id', ARGV[3], 'snapshot', ARGV[4])
redis.call('XADD', KEYS[8], 'MAXLEN', '~', ARGV[7], '*', 'snapshot_id', ARGV[3], 'previous', previous or '',
           'full', ARGV[counts_at], 'counts', ARGV[counts_at + 1])
return 1
"""
"""Stores one snapshot of a run, atomically (see ``redis_publish.Publisher``).

``KEYS``: generation pointer, and of the run's generation: owner, snapshot_id,
snapshot, positions, snapshots stream, counts, changes; then the run-token counter.
``ARGV``: run token, generation, snapshot id, snapshot JSON, stream cap, ``live`` or
``build``, changes cap, N source partitions, N (partition, offset) pairs, ``full`` or
``delta``, the count changes (JSON). Refuses, in this order:

* a live run whose generation is no longer current (a rebuild replaced it): error
  ``SWITCHED ...``;
* a run whose token is older than the generation's owner: error ``FENCED ...``;
* count changes when the generation has no snapshot yet (a new generation, or Redis
  lost its data): ``NO_TABLE``, and the publisher sends the whole table;
* the stored snapshot itself, same id and same positions (a retry of a call whose
  answer was lost): ``ALREADY_STORED``; its count changes are in Redis;
* any other snapshot whose id is not newer than the stored one (a run resumed from
  recovery state with its old token replays older epochs): ``OLDER``;
* a snapshot whose positions are behind the stored ones for any source partition
  (a restarted run still catching up): ``BEHIND``. Published positions never go
  backwards.

Otherwise it stores the snapshot, its positions and its count changes: ``STORED``.
Every call also re-creates the generation pointer (live), the owner and the
run-token counter (at least this token) if Redis lost them, so a run started later
still gets a newer token and takes over.

"Same positions" is what makes a retry safe to forget: the counts of a cut are a
function of the input before it, so Redis's table is the one the caller has.
Within one run a replayed epoch may cut the input elsewhere under the same id.
"""


class Published(IntEnum):
    """``PUBLISH_LUA``'s replies. After ``OLDER``, ``BEHIND`` and ``NO_TABLE`` the
    count changes are not in Redis: they must go with the next snapshot it stores."""

    STORED = 1
    ALREADY_STORED = 0
    BEHIND = -1
    NO_TABLE = -2
    OLDER = -3


CLAIM_LUA = """
local owner = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) > owner then
  redis.call('SET', KEYS[1], ARGV[1])
end
return redis.call('GET', KEYS[1])
"""
"""Makes ``ARGV[1]`` (a token) the owner of a generation unless a newer token owns it.

``KEYS``: the generation's owner. Replies the owner after the call.
"""

JOIN_LUA = """
local joined = redis.call('GET', KEYS[1])
local generation = joined and string.match(joined, ':(%d+)$') or redis.call('GET', KEYS[3]) or '0'
if generation ~= ARGV[3] then
  return {'moved', generation}
end
if joined then
  local sid = tonumber(redis.call('GET', KEYS[6]) or '0')
  if ARGV[2] == '1' and math.floor(sid / tonumber(ARGV[4])) == tonumber(string.match(joined, '^(%d+):')) then
    return {'published', joined}
  end
  return {'joined', joined}
end
local token = redis.call('INCR', KEYS[2])
if token > tonumber(redis.call('GET', KEYS[4]) or '0') then
  redis.call('SET', KEYS[4], token)
end
if ARGV[2] == '1' then
  redis.call('DEL', KEYS[5])
end
joined = token .. ':' .. generation
redis.call('SET', KEYS[1], joined, 'EX', ARGV[1])
return {'joined', joined}
"""
"""The token and generation of one run, the same for every process of it.

``KEYS``: the run's key, the run-token counter, the generation pointer, then of
generation G (the run's, or the current one for a new run, as the caller read it):
owner, positions, snapshot_id. ``ARGV``: how long the run's key lives (seconds), ``1``
for a fresh run (one without recovery state), G, the snapshot-id run factor.
Replies ``{'moved', generation}`` when the run's generation is not G: call again
with that generation's keys. Else ``{'joined', 'token:generation'}``: the run's
stored answer, or a new token that now owns G (a fresh run's first process also
forgets G's positions, as its input starts over). Refuses a fresh process joining
a run whose token has published G's latest snapshot, ``{'published',
'token:generation'}``: that process starts its input over, so its snapshot ids
would restart below the stored one and be ignored. Within one start of a run every
process joins before any publishes (Bytewax connects them all first).
"""

READ_LUA = """
local g = redis.call('GET', KEYS[1]) or '0'
if g ~= ARGV[1] then
  return {'moved', g}
end
local sid = redis.call('GET', KEYS[2])
if not sid then
  return {g}
end
if sid == ARGV[2] and g == ARGV[3] then
  return {g, sid}
end
local snapshot = redis.call('GET', KEYS[3])
if g ~= ARGV[3] or ARGV[4] == '' then
  local last = redis.call('XREVRANGE', KEYS[4], '+', '-', 'COUNT', 1)
  local at = '0-0'
  if last[1] then
    at = last[1][1]
  end
  return {g, sid, snapshot, 'table', at, redis.call('ZRANGE', KEYS[5], 0, -1, 'WITHSCORES')}
end
return {g, sid, snapshot, 'changes', redis.call('XRANGE', KEYS[4], '(' .. ARGV[4], '+')}
"""
"""What a reader needs to follow the latest snapshot, atomically (see ``api.store``).

``KEYS``: the generation pointer, then of generation G (the one the reader expects
to be current): snapshot_id, snapshot, changes, counts. ``ARGV``: G, the snapshot id
and generation the reader holds, the id of the last ``changes`` entry it applied (''
for none). Replies ``{'moved', current}`` when G is not the current generation (call
again with that generation's keys); ``{G}`` when there is no snapshot; ``{G, id}``
when the reader is current; else ``{G, id, snapshot, 'table', changes_at, [song,
count, ...]}`` (the whole count table, for a reader without one or of another
generation) or ``{G, id, snapshot, 'changes', entries}`` (the ``changes`` entries
after the reader's).
"""

SWITCH_LUA = """
local gen = redis.call('GET', KEYS[1]) or '0'
if gen ~= ARGV[1] then
  return redis.error_reply('SWITCHED expected generation ' .. ARGV[1] .. ', found ' .. gen)
end
redis.call('SET', KEYS[1], ARGV[2])
for i = 2, #KEYS do
  redis.call('UNLINK', KEYS[i])
end
return 1
"""
"""Points readers at a new generation and removes the old one, atomically.

``KEYS``: the generation pointer, then every key of the old generation. ``ARGV``: the
old and the new generation. Errors ``SWITCHED ...`` if the pointer is not the old
generation (someone switched already); else replies 1.
"""
