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

PUBLISH_PRELUDE = """
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
if tonumber(redis.call('GET', KEYS[7]) or '0') < token then
  redis.call('SET', KEYS[7], ARGV[1])
end
local P = 8 + 2 * tonumber(ARGV[7])
local previous = redis.call('GET', KEYS[3])
if ARGV[P] ~= 'full' and not previous then
  return -2
end
local function is_stored()
  if ARGV[3] ~= previous or redis.call('HLEN', KEYS[5]) ~= tonumber(ARGV[7]) then
    return false
  end
  for i = 8, P - 1, 2 do
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
for i = 8, P - 1, 2 do
  local stored = tonumber(redis.call('HGET', KEYS[5], ARGV[i]) or '-1')
  if tonumber(ARGV[i + 1]) < stored then
    return -1
  end
end
for i = 8, P - 1, 2 do
  redis.call('HSET', KEYS[5], ARGV[i], ARGV[i + 1])
end
redis.call('SET', KEYS[3], ARGV[3])
redis.call('SET', KEYS[4], ARGV[4])
redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[5], '*', 'snapshot_id', ARGV[3], 'snapshot', ARGV[4])
"""
"""The part of every flow's publish script that decides whether a snapshot is stored.

``KEYS`` 1-7: generation pointer, and of the run's generation: owner, snapshot_id,
snapshot, positions, snapshots stream; then the run-token counter. ``ARGV`` 1-7: run
token, generation, snapshot id, snapshot JSON, stream cap, ``live`` or ``build``, N
source partitions; then N (partition, offset) pairs; then at ``ARGV[P]`` (``P = 8 +
2N``) ``full`` or ``delta``, and the product's own arguments after it. Refuses, in
this order:

* a live run whose generation is no longer current (a rebuild replaced it): error
  ``SWITCHED ...``;
* a run whose token is older than the generation's owner: error ``FENCED ...``;
* changes (``delta``) when the generation has no snapshot yet (a new generation, or
  Redis lost its data): ``NO_TABLE``, and the publisher sends its whole state;
* the stored snapshot itself, same id and same positions (a retry of a call whose
  answer was lost): ``ALREADY_STORED``; its changes are in Redis;
* any other snapshot whose id is not newer than the stored one (a run resumed from
  recovery state with its old token replays older epochs): ``OLDER``;
* a snapshot whose positions are behind the stored ones for any source partition
  (a restarted run still catching up): ``BEHIND``. Published positions never go
  backwards.

Otherwise it stores the snapshot and its positions, and the product's body (run
next, in the same script) stores its changes: ``STORED``. Every call also re-creates
the generation pointer (live), the owner and the run-token counter (at least this
token) if Redis lost them, so a run started later still gets a newer token and
takes over.

"Same positions" is what makes a retry safe to forget: the state of a cut is a
function of the input before it, so Redis's state is the one the caller has.
Within one run a replayed epoch may cut the input elsewhere under the same id.
"""

PUBLISH_LUA = PUBLISH_PRELUDE + """
if ARGV[P] == 'full' then
  redis.call('DEL', KEYS[8])
end
for song, count in pairs(cjson.decode(ARGV[P + 1])) do
  if count > 0 then
    redis.call('ZADD', KEYS[8], count, song)
  else
    redis.call('ZREM', KEYS[8], song)
  end
end
redis.call('XADD', KEYS[9], 'MAXLEN', '~', ARGV[P + 2], '*', 'snapshot_id', ARGV[3], 'previous', previous or '',
           'full', ARGV[P], 'counts', ARGV[P + 1])
return 1
"""
"""Stores one snapshot of the listener flow, atomically (see ``redis_publish.Publisher``).

:data:`PUBLISH_PRELUDE`, then: ``KEYS`` 8-9: the generation's counts and changes;
``ARGV[P + 1]`` the count changes (JSON), ``ARGV[P + 2]`` the changes stream's cap.
A ``full`` table replaces the counts; the changes go to the changes stream, naming
the snapshot before them (readers follow it, ``api.store``).
"""

PUBLISH_BOARDS_LUA = PUBLISH_PRELUDE + """
local boards = tonumber(ARGV[P + 3])
local dropped = tonumber(ARGV[P + 4])
local a = P + 5
local size = 0
local aliases = {}
for i = 1, tonumber(ARGV[a]) do
  redis.call('HSET', KEYS[8], ARGV[a + 2 * i - 1], ARGV[a + 2 * i])
  aliases[2 * i - 1], aliases[2 * i] = ARGV[a + 2 * i - 1], ARGV[a + 2 * i]
end
a = a + 1 + 2 * tonumber(ARGV[a])
local changed = {}
for b = 1, boards do
  local z, r = KEYS[9 + 2 * b], KEYS[10 + 2 * b]
  redis.call('SADD', KEYS[9], ARGV[a])
  changed[2 * b - 1], changed[2 * b] = ARGV[a], ARGV[a + 1]
  size = size + #ARGV[a + 1]
  for player, e in pairs(cjson.decode(ARGV[a + 1])) do
    local at = string.format('%015d', e[2])
    local old = redis.call('HGET', r, player)
    if old ~= at then
      if old then
        redis.call('ZREM', z, old .. player)
      end
      redis.call('HSET', r, player, at)
    end
    redis.call('ZADD', z, -e[1], at .. player)
  end
  a = a + 2
end
local gone = {}
for d = 1, dropped do
  local k = 9 + 2 * boards + 2 * d
  redis.call('DEL', KEYS[k], KEYS[k + 1])
  redis.call('SREM', KEYS[9], ARGV[a])
  gone[d] = ARGV[a]
  a = a + 1
end
if ARGV[P] == 'full' or size > tonumber(ARGV[P + 2]) then
  redis.call('XADD', KEYS[10], 'MAXLEN', '~', ARGV[P + 1], '*', 'snapshot_id', ARGV[3], 'previous', previous or '',
             'full', ARGV[P] == 'full' and 'full' or 'large')
else
  redis.call('XADD', KEYS[10], 'MAXLEN', '~', ARGV[P + 1], '*', 'snapshot_id', ARGV[3], 'previous', previous or '',
             'full', 'delta', 'aliases', #aliases > 0 and cjson.encode(aliases) or '[]',
             'boards', '[' .. table.concat(changed, ',') .. ']', 'dropped', '[' .. table.concat(gone, ',') .. ']')
end
return 1
"""
"""Stores one snapshot of the boards flow, atomically (see ``redis_publish.BoardsState``).

:data:`PUBLISH_PRELUDE`, then ``KEYS``: 8 the games' aliases (hash: game -> JSON
``[daily, weekly]``), 9 the set of boards (members: JSON ``[game, board]``), 10 the
``board_changes`` stream, then per changed board its sorted set and its
``reached_at`` hash, then the same two keys of every dropped board. ``ARGV`` after
``ARGV[P]``: the changes stream's cap (entries), the most bytes of entries one stream
entry copies, the number of changed boards B, of dropped
boards D, of alias updates A and A (game, JSON) pairs; per changed board its JSON
name and its entries as one JSON object ``{player: [score, reached_at]}`` (one
argument per board: packing it is orjson's work in C, unpacking it Redis's, on the
core the flow is not using); per dropped board its JSON name.

A board's sorted set orders its entries as docs/semantics/boards.md section 4 does with Redis's own
order: the score is ``-score`` (ascending = score descending) and the member is the
15-digit ``reached_at`` followed by the player id, so equal scores order by
``reached_at`` then by the id's bytes. ``ZRANK`` is then the exact rank - 1, and
``ZCOUNT key -inf (s`` the number of players with a strictly greater score. The
hash gives a player's member back from their id.

Every stored snapshot also adds one entry to the ``board_changes`` stream (capped
with ``MAXLEN ~``), for the API's in-process mirror (``api.board_mirror``):
``snapshot_id``, ``previous`` (the snapshot id stored before it, '' if none: entries
chain), ``full`` (``delta``, ``full`` or ``large``), and for a ``delta`` the snapshot's changes
as the script received them, joined without re-encoding: ``aliases`` a JSON array
``[game, periods JSON, ...]``, ``boards`` a JSON array ``[[game, board], {player:
[score, reached_at]}, ...]``, ``dropped`` a JSON array of ``[game, board]``. Entries
are absolute (the new score and ``reached_at``), so replaying them over any older
state converges. A ``full`` entry carries nothing: the publisher sent its whole
state (Redis had lost it, or a new generation), and a mirror reloads the boards. Nor
does a ``large`` one, whose entries exceed the byte bound (a backlog's catch-up, not
steady traffic): the stream's memory stays bounded by cap x bound, and a mirror
reloads rather than replays it.
"""


ACTIVITY_SLOT = """
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
"""
"""Lua shared by the activity scripts: a workspace's slot (``SLOTS`` is the index of
the slots hash in ``KEYS``), a command over a long list in pieces (Lua's ``unpack``
stops at about 8,000 values), and applying one workspace's changes (a decoded JSON
object ``{channel: count}``, 0 removes the channel) to a sorted set: one ``ZADD`` and
one ``ZREM`` for many channels, not one call each (a call from Lua costs about as
much as the command itself); it returns whether the sorted set has members."""

PUBLISH_ACTIVITY_LUA = PUBLISH_PRELUDE + "local SLOTS = 9\n" + ACTIVITY_SLOT + """
local full = ARGV[P] == 'full'
if full then
  redis.call('DEL', KEYS[8], KEYS[9])
  for k = 10, #KEYS do
    redis.call('UNLINK', KEYS[k])
  end
end
local a = P + 1
local W = tonumber(ARGV[a])
local names, slots, kept, emptied = {}, {}, {}, {}
for w = 1, W do
  names[w] = ARGV[a + w]
end
local direct = {}
if W > 0 then
  direct = cjson.decode(ARGV[a + W + 1])
end
if not full then
  for i = 1, W, 4000 do
    local got = redis.call('HMGET', KEYS[9], unpack(names, i, math.min(i + 3999, W)))
    for j = 1, #got do
      slots[i + j - 1] = got[j]
    end
  end
end
for w = 1, W do
  local za, zb = KEYS[8 + 2 * w], KEYS[9 + 2 * w]
  local z = za
  if slots[w] == 'b' then
    z = zb
  end
  if apply(z, direct[names[w]]) then
    kept[#kept + 1] = names[w]
  else
    emptied[#emptied + 1] = names[w]
    redis.call('UNLINK', za, zb)
  end
end
in_batches('SADD', KEYS[8], kept)
in_batches('SREM', KEYS[8], emptied)
in_batches('HDEL', KEYS[9], emptied)
local s = a + W + 2
local present, to_b, to_a = {}, {}, {}
for i = 1, tonumber(ARGV[s]) do
  local ws = ARGV[s + 2 * i - 1]
  present[#present + 1] = ws
  if ARGV[s + 2 * i] == 'b' then
    to_b[#to_b + 1] = ws
    to_b[#to_b + 1] = 'b'
  else
    to_a[#to_a + 1] = ws
  end
end
local g = s + 2 * tonumber(ARGV[s]) + 1
local gone = {}
for i = g + 1, g + tonumber(ARGV[g]) do
  gone[#gone + 1] = ARGV[i]
end
if not full then
  for k = 10 + 2 * W, #KEYS do
    redis.call('UNLINK', KEYS[k])
  end
end
in_batches('SADD', KEYS[8], present)
in_batches('HSET', KEYS[9], to_b)
in_batches('HDEL', KEYS[9], to_a)
in_batches('SREM', KEYS[8], gone)
in_batches('HDEL', KEYS[9], gone)
return 1
"""
"""Stores one snapshot of the activity flow, atomically (see ``redis_activity.ActivityState``).

:data:`PUBLISH_PRELUDE`, then ``KEYS`` 8: the set of workspaces with a count, 9: the
slots hash (``redis_keys``: which of its two sorted sets a workspace's readers read).
A snapshot's changed workspaces come in two ways, and ``ARGV`` after ``ARGV[P]``
holds three lists, each its length first:

* W workspaces whose changes the script applies to the slot readers read (all of a
  small snapshot's): their ids, then their changes as one JSON object
  ``{workspace: {channel: count}}`` (0 removes the channel; one document, decoded
  once, costs Redis less than one per workspace);
* S workspaces ``STAGE_ACTIVITY_LUA`` already wrote into the slot readers do not read
  (a large snapshot's, in calls short enough not to hold readers up), still with a
  count: pairs (workspace id, the slot it was written in); the script switches them;
* G workspaces staged that are left without a count: their ids.

``KEYS`` from 10: both slots of the W workspaces, then of the G ones and (``full``
only) of the workspaces Redis holds that the snapshot does not name, all of which it
removes (``UNLINK``: Redis frees them off its main thread). A ``full`` snapshot (an
execution's first: every count) starts from no workspaces and no slots.

A workspace's sorted set holds its channels with a positive count, score = count:
``ZREVRANGE`` then orders them count descending, then channel id descending
byte-wise (Redis orders equal scores by the member's bytes), which is docs/semantics/windows.md 4,
and ``ZREVRANK`` is the rank - 1.
"""

ACTIVITY_FENCE = """
if ARGV[3] == 'live' then
  local gen = redis.call('GET', KEYS[1])
  if gen and gen ~= ARGV[2] then
    return redis.error_reply('SWITCHED generation ' .. ARGV[2] .. ' was replaced by generation ' .. gen)
  end
end
local owner = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[1]) < owner then
  return redis.error_reply('FENCED run ' .. ARGV[1] .. ' is not the owner; current owner is run ' .. owner)
end
"""
"""The checks of :data:`PUBLISH_PRELUDE` that concern a writer, for the activity scripts
that write only what readers do not read: ``KEYS`` 1 the generation pointer, 2 the
generation's owner; ``ARGV`` 1 run token, 2 generation, 3 ``live`` or ``build``. They
claim nothing: the publish script that follows does."""

STAGE_ACTIVITY_LUA = "local SLOTS = 3\n" + ACTIVITY_SLOT + ACTIVITY_FENCE + """
local budget, spent, reply, staged = tonumber(ARGV[4]), 0, {0}, {}
for i = 1, (#ARGV - 4) / 3 do
  local ws, how, changes = ARGV[2 + 3 * i], ARGV[3 + 3 * i], cjson.decode(ARGV[4 + 3 * i])
  local src, dst, slot = KEYS[3 + 2 * i], KEYS[4 + 2 * i], 'b'
  if slot_of(ws) == 'b' then
    src, dst, slot = dst, src, 'a'
  end
  local cost = 16
  for _ in pairs(changes) do
    cost = cost + 1
  end
  if how == 'copy' then
    cost = cost + redis.call('ZCARD', src)
  end
  if i > 1 and spent + cost > budget then
    break
  end
  spent = spent + cost
  staged[#staged + 1] = ws
  if how == 'copy' then
    if redis.call('COPY', src, dst, 'REPLACE') == 0 then
      redis.call('DEL', dst)
    end
  elseif how == 'fresh' then
    redis.call('DEL', dst)
  end
  reply[1] = i
  reply[i + 1] = {slot, apply(dst, changes) and 1 or 0}
end
in_batches('SADD', KEYS[4], staged)
return reply
"""
"""Writes part of a large activity snapshot where readers do not look (``redis_activity``).

:data:`ACTIVITY_FENCE`, then ``KEYS`` 3: the slots hash, 4: the set of workspaces
with a staged slot (so that a crash before the switch leaks nothing: the next full
snapshot removes them), then both slots of each item's workspace. ``ARGV`` after the
fence's: a budget, then items of three
(workspace id, how, changes): ``copy`` starts the slot readers do not read from the
one they read, ``fresh`` from nothing (a ``full`` snapshot), ``more`` goes on with a
workspace an earlier item started (a workspace with many changes comes in several
items); then its changes, as in ``PUBLISH_ACTIVITY_LUA``. Items are done in order
while the members copied and changed, and 16 for each item (its own calls), stay
within the budget (the first always), so one call holds Redis about as long as the
budget's worth of ``ZADD``. Replies the
number of items done, then per item done the slot it wrote and whether that sorted
set has members (1) or not (0): the caller sends the rest in another call. Nothing
here is visible to a reader until ``PUBLISH_ACTIVITY_LUA`` switches the slots."""

DROP_ACTIVITY_LUA = "local SLOTS = 3\n" + ACTIVITY_SLOT + ACTIVITY_FENCE + """
for i = 4, #ARGV do
  if slot_of(ARGV[i]) == 'b' then
    redis.call('UNLINK', KEYS[2 * i - 3])
  else
    redis.call('UNLINK', KEYS[2 * i - 2])
  end
  redis.call('SREM', KEYS[4], ARGV[i])
end
return 1
"""
"""Frees the slot readers do not read of each workspace (the previous ranking after a
switch, or a staged one a refused snapshot left). :data:`ACTIVITY_FENCE`, then
``KEYS`` 3: the slots hash, 4: the set of staged workspaces, then both slots of each
workspace; ``ARGV`` after the fence's: the workspace ids."""


class Published(IntEnum):
    """The publish scripts' replies (:data:`PUBLISH_PRELUDE`). After ``OLDER``, ``BEHIND``
    and ``NO_TABLE`` the changes are not in Redis: they must go with the next snapshot
    it stores."""

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
redis.call('SADD', KEYS[2], ARGV[1])
return 1
"""
"""Points readers at a new generation and retires the old one, atomically.

``KEYS``: the generation pointer, the set of retired generations. ``ARGV``: the old and
the new generation. Errors ``SWITCHED ...`` if the pointer is not the old generation
(someone switched already); else replies 1. The caller then removes the retired
generation's keys by their prefix (``redis_generations.drop_generation``).
"""

BOARD_READ_LUA = """
local g = redis.call('GET', KEYS[1]) or '0'
if g ~= ARGV[1] then
  return {'moved', g}
end
if ARGV[2] ~= '' then
  local periods = redis.call('HGET', KEYS[3], ARGV[7])
  local resolved = ''
  if periods then
    local p = cjson.decode(periods)
    local name = p[ARGV[2] == 'daily' and 1 or 2]
    if name ~= cjson.null then
      resolved = ARGV[2] .. ':' .. name
    end
  end
  if resolved ~= ARGV[3] then
    return {'alias', resolved}
  end
end
local sid = redis.call('GET', KEYS[2]) or ''
local card = redis.call('ZCARD', KEYS[4])
if card == 0 then
  return {'board', sid, 0}
end
if ARGV[4] == 'top' then
  return {'board', sid, card, redis.call('ZRANGE', KEYS[4], 0, tonumber(ARGV[5]) - 1, 'WITHSCORES')}
end
local at = redis.call('HGET', KEYS[5], ARGV[6])
if not at then
  return {'board', sid, card, false}
end
local m = at .. ARGV[6]
local score = redis.call('ZSCORE', KEYS[4], m)
local rank = redis.call('ZRANK', KEYS[4], m)
if ARGV[4] == 'player' then
  return {'board', sid, card, {score, rank, redis.call('ZCOUNT', KEYS[4], '-inf', '(' .. score)}}
end
local start = math.max(0, rank - tonumber(ARGV[5]))
local items = redis.call('ZRANGE', KEYS[4], start, rank + tonumber(ARGV[5]), 'WITHSCORES')
return {'board', sid, card, {start, redis.call('ZCOUNT', KEYS[4], '-inf', '(' .. items[2]), items}}
"""
"""One board query, atomically. ``KEYS``: the generation pointer, then of generation
G: snapshot_id, aliases, the board's sorted set and its ``reached_at`` hash.
``ARGV``: G, the alias asked for (``daily``, ``weekly`` or ''), the board it resolved
to, the query (``top``, ``player``, ``around``), n or r, the player, the game.
Replies ``{'moved', current}`` (call again in that generation), ``{'alias',
board}`` (the alias names another board now), or ``{'board', snapshot id, players,
answer}``: for ``top`` the first n ``member, score`` pairs; for ``player`` ``{score,
rank - 1, players with a better score}`` or false; for ``around`` ``{first rank - 1,
the first item's players with a better score, member, score ...}`` or false."""

ACTIVITY_READ_LUA = """
local g = redis.call('GET', KEYS[1]) or '0'
if g ~= ARGV[1] then
  return {'moved', g}
end
local sid = redis.call('GET', KEYS[2])
if not sid then
  return {'none'}
end
local doc = false
if sid ~= ARGV[2] then
  doc = redis.call('GET', KEYS[3])
end
if ARGV[3] == 'global' then
  return {'snapshot', sid, doc}
end
local z = KEYS[5]
if redis.call('HGET', KEYS[4], ARGV[6]) == 'b' then
  z = KEYS[6]
end
if ARGV[3] == 'top' then
  return {'snapshot', sid, doc, redis.call('ZREVRANGE', z, 0, tonumber(ARGV[4]) - 1, 'WITHSCORES')}
end
local count = redis.call('ZSCORE', z, ARGV[5])
if not count then
  return {'snapshot', sid, doc, false}
end
return {'snapshot', sid, doc, {count, redis.call('ZREVRANK', z, ARGV[5])}}
"""
"""One activity query, atomically. ``KEYS``: the generation pointer, then of generation G:
snapshot_id, snapshot, the slots hash and both slots of the workspace (any keys for
``global``). ``ARGV``: G, the snapshot id whose document the reader holds ('' for
none), the query (``top``, ``channel``, ``global``), k, the channel, the workspace. Replies ``{'moved',
current}``, ``{'none'}`` (nothing published yet) or ``{'snapshot', id, document or
false (the reader holds it), answer}``: for ``top`` the first k ``channel, count``
pairs, for ``channel`` ``{count, rank - 1}`` or false."""

BOARD_CHUNK_LUA = """
local start = 0
if #ARGV > 1 then
  start = nil
  for i = #ARGV, 2, -1 do
    local rank = redis.call('ZRANK', KEYS[1], ARGV[i])
    if rank then
      start = rank + 1
      break
    end
  end
  if not start then
    return false
  end
end
return redis.call('ZRANGE', KEYS[1], start, start + tonumber(ARGV[1]) - 1, 'WITHSCORES')
"""
"""The next chunk of a board for a reader loading it in pieces (``api.board_mirror``).

``KEYS``: the board's sorted set. ``ARGV``: the chunk's size, then anchors: members
the reader read last, oldest first. Replies the ``member, score`` pairs after the
newest anchor still on the board (from the start without anchors), or false when
every anchor has left it (their players changed): start the board over. Entries
that did not change keep their order among themselves, so every one of them after
an anchor is still after it: a load in chunks misses none, whatever is published
meanwhile (the changed ones come back from the changes stream)."""
