"""Where snapshots live in Redis, how they get there, and how readers get them.

Key layout for a namespace ``ns``; the ``{ns}`` hash tag keeps every key of a
namespace in one Redis Cluster slot, so one script may touch them all:

==============================  ==================================================
``{ns}:runs``                   run tokens: ``INCR``-ed by every run and rebuild
``{ns}:generation``             the generation readers use (absent means 0)
``{ns}:g<G>:owner``             the token of the run that owns generation G
``{ns}:g<G>:snapshot``          G's latest snapshot (JSON)
``{ns}:g<G>:snapshot_id``       its id
``{ns}:g<G>:positions``         its input positions (hash: partition -> offset)
``{ns}:g<G>:snapshots``         a stream of G's published snapshots (capped)
``{ns}:g<G>:counts``            every song's count in G's latest snapshot (sorted
                                set: ``ZREVRANK`` is the song's rank)
``{ns}:g<G>:changes``           per published snapshot, the counts that changed
                                (stream, capped): readers keep their own copy of
                                the count table with it (see ``api.store``)
==============================  ==================================================

A live run publishes into the current generation. ``rankflow rebuild`` builds a new
generation beside it, checks it, then switches ``{ns}:generation`` and removes the
old generation in one script: readers see the old ranking or the new one, never a
half-built one.

The publish script (atomic in Redis) refuses, in this order:

* a live run whose generation is no longer current (a rebuild replaced it):
  :class:`GenerationSwitched`;
* a run whose token is older than the generation's owner: :class:`FencedError`;
* a snapshot whose id is not newer than the stored one (a retry): ignored;
* a snapshot whose positions are behind the stored ones for any source partition
  (a restarted run still catching up): ignored. Published positions never go
  backwards;
* changes to the full count table when the generation has no snapshot yet (a new
  generation, or Redis lost its data): the publisher then sends the whole table.

If Redis lost its data, the first publish re-creates the generation pointer, the
owner and the run-token counter (at least the publisher's token, so a run started
later still gets a newer token and takes over), and the next complete snapshot
restores the ranking: every snapshot is whole, so nothing else needs rebuilding.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson
import redis
from bytewax.outputs import DynamicSink, StatelessSinkPartition

from rankflow.operators.metrics import METRICS
from rankflow.state.snapshot import Snapshot

log = logging.getLogger("rankflow.publisher")

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_NAMESPACE = "rankflow"
STREAM_MAXLEN = 10_000
CHANGES_MAXLEN = 1_000  # about 4 minutes of snapshots at the default barrier; a reader further behind reloads

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
if tonumber(ARGV[3]) <= tonumber(previous or '-1') then
  return 0
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

CLAIM_LUA = """
local owner = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) > owner then
  redis.call('SET', KEYS[1], ARGV[1])
end
return redis.call('GET', KEYS[1])
"""

JOIN_LUA = """
local joined = redis.call('GET', KEYS[1])
if joined then
  return joined
end
local token = redis.call('INCR', KEYS[2])
local generation = redis.call('GET', KEYS[3]) or '0'
local owner = KEYS[4]:gsub('{GEN}', generation)
if token > tonumber(redis.call('GET', owner) or '0') then
  redis.call('SET', owner, token)
end
if ARGV[2] == '1' then
  redis.call('DEL', (KEYS[5]:gsub('{GEN}', generation)))
end
joined = token .. ':' .. generation
redis.call('SET', KEYS[1], joined, 'EX', ARGV[1])
return joined
"""

READ_LUA = """
local g = redis.call('GET', KEYS[1]) or '0'
local base = ARGV[1] .. ':g' .. g
local sid = redis.call('GET', base .. ':snapshot_id')
if not sid then
  return {g}
end
if sid == ARGV[2] and g == ARGV[3] then
  return {g, sid}
end
local snapshot = redis.call('GET', base .. ':snapshot')
if g ~= ARGV[3] or ARGV[4] == '' then
  local last = redis.call('XREVRANGE', base .. ':changes', '+', '-', 'COUNT', 1)
  local at = '0-0'
  if last[1] then
    at = last[1][1]
  end
  return {g, sid, snapshot, 'table', at, redis.call('ZRANGE', base .. ':counts', 0, -1, 'WITHSCORES')}
end
return {g, sid, snapshot, 'changes', redis.call('XRANGE', base .. ':changes', '(' .. ARGV[4], '+')}
"""
"""What a reader needs to follow the latest snapshot, atomically (see ``api.store``).

``ARGV``: namespace tag, the snapshot id and generation the reader holds, the id of
the last ``changes`` entry it applied ('' for none). Replies ``{generation}`` when
there is no snapshot; ``{generation, id}`` when the reader is current; else
``{generation, id, snapshot, 'table', changes_at, [song, count, ...]}`` (the whole
count table, for a reader without one or of another generation) or
``{generation, id, snapshot, 'changes', entries}`` (the ``changes`` entries after the
reader's).
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


class FencedError(RuntimeError):
    """A newer run owns the generation; this one must stop publishing."""


class GenerationSwitched(RuntimeError):
    """A rebuild replaced this run's generation; restart the run to follow it."""


class Keys:
    """Key names of one namespace (and one generation of it)."""

    def __init__(self, namespace: str, generation: int = 0) -> None:
        if not namespace or "}" in namespace or "{" in namespace:
            raise ValueError(f"invalid namespace {namespace!r}: non-empty, without braces")
        self.namespace = namespace
        self.tag = "{" + namespace + "}"
        self.generation_no = generation
        self.runs = f"{self.tag}:runs"
        self.generation = f"{self.tag}:generation"
        g = f"{self.tag}:g{generation}"
        self.owner = f"{g}:owner"
        self.snapshot = f"{g}:snapshot"
        self.snapshot_id = f"{g}:snapshot_id"
        self.positions = f"{g}:positions"
        self.stream = f"{g}:snapshots"
        self.counts = f"{g}:counts"
        self.changes = f"{g}:changes"

    def of_generation(self, generation: int) -> "Keys":
        return Keys(self.namespace, generation)

    def generation_keys(self) -> list[str]:
        return [self.owner, self.snapshot, self.snapshot_id, self.positions, self.stream, self.counts, self.changes]


def connect(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=10)


def current_generation(client: redis.Redis, namespace: str) -> int:
    raw = client.get(Keys(namespace).generation)
    return int(raw) if raw is not None else 0


def new_run_token(client: redis.Redis, namespace: str) -> int:
    return int(client.incr(Keys(namespace).runs))


def claim_generation(client: redis.Redis, namespace: str, generation: int, token: int) -> None:
    """Make ``token`` the owner of ``generation``: older runs are fenced from now on."""
    keys = Keys(namespace, generation)
    client.eval(CLAIM_LUA, 1, keys.owner, token)


def join_run(client: redis.Redis, namespace: str, run_id: str, fresh: bool = False,
             ttl_s: int = 86_400) -> tuple[int, int]:
    """The token and generation of run ``run_id``, taking them if this is its first process.

    Every process of a multi-process run calls this with the same ``run_id``: the
    first one takes a new token and claims the current generation for it, the others
    get the same answer, so they publish as one run. A ``fresh`` run (one that does
    not resume from recovery state) starts its input over on purpose, so it also
    forgets the generation's published positions: "never back in time" holds within
    one lineage of state, and a new computation replaces the old one.
    """
    keys = Keys(namespace)
    pattern = f"{keys.tag}:g{{GEN}}"
    joined = client.eval(JOIN_LUA, 5, f"{keys.tag}:run:{run_id}", keys.runs, keys.generation,
                         f"{pattern}:owner", f"{pattern}:positions", ttl_s, "1" if fresh else "0")
    token, generation = joined.decode().split(":")
    return int(token), int(generation)


def switch_generation(client: redis.Redis, namespace: str, old: int, new: int) -> None:
    """Point readers at ``new`` and remove ``old``, atomically."""
    keys = Keys(namespace)
    old_keys = keys.of_generation(old).generation_keys()
    try:
        client.eval(SWITCH_LUA, 1 + len(old_keys), keys.generation, *old_keys, old, new)
    except redis.ResponseError as exc:
        raise GenerationSwitched(str(exc).replace("SWITCHED ", "")) from None


def drop_generation(client: redis.Redis, namespace: str, generation: int) -> None:
    client.unlink(*Keys(namespace, generation).generation_keys())


def read_latest(client: redis.Redis, namespace: str) -> dict[str, Any] | None:
    """The current generation's latest snapshot, or None if there is none."""
    keys = Keys(namespace)
    for _ in range(3):  # a generation switch between the two reads: read again
        generation = current_generation(client, namespace)
        raw = client.get(keys.of_generation(generation).snapshot)
        if raw is not None:
            return orjson.loads(raw)
        if current_generation(client, namespace) == generation:
            return None
    return None


def read_generation(client: redis.Redis, namespace: str, generation: int) -> dict[str, Any] | None:
    raw = client.get(Keys(namespace, generation).snapshot)
    return None if raw is None else orjson.loads(raw)


def read_counts(client: redis.Redis, namespace: str) -> dict[str, int]:
    """Every song's count in the current generation's latest snapshot."""
    keys = Keys(namespace, current_generation(client, namespace))
    return {song.decode(): int(count) for song, count in client.zrange(keys.counts, 0, -1, withscores=True)}


def read_history(client: redis.Redis, namespace: str, generation: int | None = None) -> list[dict[str, Any]]:
    """Every snapshot still in a generation's stream, oldest first."""
    if generation is None:
        generation = current_generation(client, namespace)
    stream = Keys(namespace, generation).stream
    return [orjson.loads(fields[b"snapshot"]) for _, fields in client.xrange(stream)]


class Publisher:
    """Publishes the snapshots of one run into one generation.

    ``live=True`` (a run) requires the generation to stay current; ``live=False`` (a
    rebuild) writes into a generation readers do not use yet.
    """

    def __init__(self, url: str, namespace: str, run_token: int, generation: int = 0,
                 live: bool = True, retry_for_s: float = 300.0) -> None:
        self._client = connect(url)
        self._keys = Keys(namespace, generation)
        self._script = self._client.register_script(PUBLISH_LUA)
        self._token = run_token
        self._generation = generation
        self._mode = "live" if live else "build"
        self._retry_for_s = retry_for_s
        # Count changes not yet in Redis: they wait for the next snapshot Redis accepts.
        self._pending_counts: dict[str, int] = {}
        self._pending_full = False
        self._mirror: dict[str, int] = {}  # the whole table, for a Redis that lost it

    def publish(self, snapshot: Snapshot) -> int:
        """1 stored; 0 not newer than the stored id; -1 behind the stored positions.

        The full count table goes with every snapshot as changes; when Redis has no
        table for the generation (it is new, or Redis lost its data) the script says
        so and the publisher sends the whole table, which it mirrors for that case.
        """
        if snapshot.counts_full:
            self._pending_counts, self._pending_full = dict(snapshot.counts), True
            self._mirror = {song: n for song, n in snapshot.counts.items() if n > 0}
        else:
            self._pending_counts.update(snapshot.counts)
            for song, n in snapshot.counts.items():
                if n > 0:
                    self._mirror[song] = n
                else:
                    self._mirror.pop(song, None)
        deadline = time.monotonic() + self._retry_for_s
        delay = 0.1
        while True:
            obj = snapshot.to_json_obj(int(time.time() * 1000))
            body = orjson.dumps(obj)
            try:
                started = time.perf_counter()
                outcome = int(self._call(snapshot, body))
                if outcome == -2:  # the generation has no table yet: send all of it
                    self._pending_counts, self._pending_full = dict(self._mirror), True
                    outcome = int(self._call(snapshot, body))
                if outcome == 1:
                    METRICS.published(obj, time.perf_counter() - started)
                if outcome >= 0:  # stored now, or stored by an earlier try whose answer was lost
                    self._pending_counts, self._pending_full = {}, False
                return outcome
            except redis.ConnectionError as exc:
                if time.monotonic() + delay > deadline:
                    raise
                log.warning("Redis unreachable (%s); retrying snapshot %s in %.1fs",
                            exc, snapshot.snapshot_id, delay)
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    def _call(self, snapshot: Snapshot, body: bytes) -> Any:
        k = self._keys
        positions = [x for part, offset in sorted(snapshot.positions.items()) for x in (part, offset)]
        try:
            return self._script(
                keys=[k.generation, k.owner, k.snapshot_id, k.snapshot, k.positions, k.stream, k.counts, k.changes,
                      k.runs],
                args=[self._token, self._generation, snapshot.snapshot_id, body, STREAM_MAXLEN, self._mode,
                      CHANGES_MAXLEN, len(positions) // 2, *positions, "full" if self._pending_full else "delta",
                      orjson.dumps(self._pending_counts)],
            )
        except redis.ResponseError as exc:
            message = str(exc)
            if message.startswith("FENCED"):
                raise FencedError(message.removeprefix("FENCED ")) from None
            if message.startswith("SWITCHED"):
                raise GenerationSwitched(message.removeprefix("SWITCHED ")) from None
            raise

    def close(self) -> None:
        self._client.close()


class _PublisherPartition(StatelessSinkPartition[tuple[str, Snapshot]]):
    def __init__(self, publisher: Publisher) -> None:
        self._publisher = publisher

    def write_batch(self, items: list[tuple[str, Snapshot]]) -> None:
        for _, snapshot in items:
            self._publisher.publish(snapshot)

    def close(self) -> None:
        self._publisher.close()


class RedisSnapshotSink(DynamicSink[tuple[str, Snapshot]]):
    """Bytewax sink publishing the merger's ``(key, Snapshot)`` items."""

    def __init__(self, url: str, namespace: str, run_token: int, generation: int = 0, live: bool = True) -> None:
        self._args = (url, namespace, run_token, generation, live)

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _PublisherPartition:
        return _PublisherPartition(Publisher(*self._args))
