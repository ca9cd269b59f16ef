"""What the HTTP service reads from Redis, and the in-process copy in front of it.

Readers never touch the flow: everything comes from the keys the publisher writes
(``connectors.redis_publish``). A background task (:class:`SnapshotCache`) asks
Redis for the current snapshot id, a few bytes, whenever a publish is announced
(``api.announce``) and at least every ``poll_ms``, with one script
(``scripts.READ_LISTENERS``; called a second time after a rebuild's switch, with the new
generation's keys); when the id changed the same call returns the new snapshot and
the count changes published since the ones this process applied. The service keeps its
own copy of the full count table (a :class:`state.ranking_index.RetractableIndex`), so
every request, the top K or one song's count and rank, is answered from memory, and
the snapshot and the table always switch together: no response mixes two
snapshots. A process without a table (just started, a new generation, or too far
behind the capped ``changes`` stream) loads the whole table once.

When Redis has no usable ranking the cache keeps the last snapshot and table it
saw, so they can be served marked stale.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import orjson
import redis

from rankflow.api.change_feed import FeedGap, chain_end
from rankflow.api.parts import Health, Part, close_client, gauge, read_client, redis_client
from rankflow.api.watch import Polling
from rankflow.connectors.redis_generations import GenerationMoving
from rankflow.connectors.redis_keys import Keys
from rankflow.connectors.redis_publish import loads_document
from rankflow.connectors.script_query import arun, bind
from rankflow.connectors.scripts import MOVED, MOVES, READ_LISTENERS, Call
from rankflow.state.ranking_index import RetractableIndex

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from rankflow.api.settings import Settings

log = logging.getLogger("rankflow.api")


class CurrentRead:
    """One call of ``READ_LISTENERS`` for a cache (a ``script_query.Query``), in the
    generation Redis last called current, following it when it moved."""

    attempts = MOVES

    def __init__(self, cache: SnapshotCache, snapshot_id: int | str, generation: str, changes_at: str) -> None:
        self.cache, self.held = cache, (snapshot_id, generation, changes_at)
        self.reply: list[Any] = []

    def call(self) -> Call:
        current = self.cache._current
        k = self.cache.keys.of_generation(int(current))
        snapshot_id, generation, changes_at = self.held
        return READ_LISTENERS.ordered(
            {"generation": k.generation, "snapshot_id": k.snapshot_id, "snapshot": k.snapshot, "changes": k.changes,
             "counts": k.counts},
            {"generation": current, "held_snapshot_id": snapshot_id, "held_generation": generation,
             "changes_at": changes_at})

    def settle(self, reply: list[Any]) -> bool:
        if reply[0] == MOVED:
            self.cache._current = reply[1].decode()
            return False
        self.reply = reply
        return True

    def gave_up(self) -> Exception:
        return GenerationMoving(self.cache.keys.namespace)


class SnapshotCache(Polling):
    name = "snapshot poller"
    wait_first = True  # :meth:`start` read the first snapshot

    def __init__(self, url: str, namespace: str, poll_ms: int = 1000, client: aioredis.Redis | None = None) -> None:
        super().__init__(poll_ms)
        self.keys = Keys(namespace)
        self.client = redis_client(url) if client is None else client  # a reader of replicas: ``parts.read_client``
        self.snapshot: dict[str, Any] | None = None
        self.fresh = False  # the cached snapshot is Redis's current one
        self.problem: str | None = "not read yet"
        self.table = RetractableIndex()  # every song's count in ``snapshot``
        self.table_loads = 0  # whole-table reads (the rest are changes)
        self._generation: str | None = None
        self._current = "0"  # the generation Redis last called current: whose keys the read script gets
        self._changes_at = ""  # id of the last ``changes`` entry applied to ``table``
        self._read = bind(self.client, READ_LISTENERS)

    async def start(self) -> None:  # type: ignore[override]  # the first snapshot is read before serving
        await self.refresh()
        super().start()

    async def stop(self) -> None:
        """Stop polling and close the Redis connections, in bounded time (:class:`Polling`)."""
        await super().stop()
        await close_client(self.client)

    async def poll_once(self) -> None:
        await self.refresh()

    def poll_failed(self, exc: Exception) -> bool:
        # Something in Redis this reader cannot follow (not our keys' shape?):
        # serve what we have as stale and load the whole table next time.
        log.exception("cannot follow the published snapshots")
        self._generation, self._changes_at = None, ""
        self._lost(f"cannot read the published snapshots: {exc!r}")
        return False

    async def refresh(self) -> None:
        try:
            reply = await self._read_current(self.snapshot["snapshot_id"] if self.snapshot else "",
                                             self._generation or "", self._changes_at)
            if len(reply) > 2 and not self._follow(reply):
                self._changes_at = ""  # a gap in the changes: load the whole table
                reply = await self._read_current("", "", "")
                self._follow(reply)
        except (redis.RedisError, OSError) as exc:
            self._lost(f"cannot reach Redis: {exc}")
            return
        if len(reply) == 1:
            self._lost(f"no usable ranking in namespace {self.keys.namespace!r}")
        else:
            self.fresh, self.problem = True, None

    async def _read_current(self, snapshot_id: int | str, generation: str, changes_at: str) -> list[Any]:
        """``READ_LISTENERS``'s reply for the current generation, following it if it moved."""
        return (await arun(self._read, CurrentRead(self, snapshot_id, generation, changes_at))).reply

    def _follow(self, reply: list[Any]) -> bool:
        """Switch to the snapshot in ``reply``; False if its changes do not follow ours."""
        generation, sid, raw, kind = reply[0].decode(), int(reply[1]), reply[2], reply[3]
        if kind == b"table":
            flat = reply[5]
            table = RetractableIndex({flat[i].decode(): int(float(flat[i + 1])) for i in range(0, len(flat), 2)})
            changes_at = reply[4].decode()
            self.table_loads += 1
        else:
            entries = [(entry_id.decode(), dict(zip(fields[::2], fields[1::2]))) for entry_id, fields in reply[4]]
            if not self._continues(entries, sid):  # the script sends changes only for our generation
                return False
            table, changes_at = self.table, entries[-1][0]
            for _, entry in entries:
                if entry[b"full"] == b"full":
                    table = RetractableIndex()  # the publisher sent the whole table (Redis had lost it)
                table.set_counts(orjson.loads(entry[b"counts"]))
        snapshot = orjson.loads(raw)
        recent = snapshot.get("recent")
        if recent is not None and recent["watermark"].__class__ is float:  # event time beyond 64 bits
            snapshot = loads_document(raw)  # orjson reads such integers as floats; read it exactly
        self.table, self._generation, self._changes_at = table, generation, changes_at
        changed = self.snapshot is None or sid != self.snapshot["snapshot_id"]
        self.snapshot = snapshot
        if changed:
            self._announce_change()
        return True

    def _continues(self, entries: list[tuple[str, dict[bytes, bytes]]], sid: int) -> bool:
        """Whether ``entries`` lead from our snapshot to ``sid`` without a gap (a trimmed
        or lost entry); a whole-table entry starts a new chain (``api.change_feed``)."""
        if not entries or self.snapshot is None:
            return False
        try:
            at = chain_end(str(self.snapshot["snapshot_id"]).encode(), (entry for _, entry in entries),
                           full_starts_over=True)
        except FeedGap:
            return False
        return at == str(sid).encode()

    def _lost(self, problem: str) -> None:
        if self.problem != problem:
            log.warning("%s", problem)
        self.fresh, self.problem = False, problem

    def song(self, song_id: str) -> dict[str, Any] | None:
        """One song's count and rank in the cached snapshot; None if it has no listeners."""
        if self.snapshot is None:
            return None
        rank = self.table.rank(song_id)
        if rank is None:
            return None
        return {"snapshot_id": self.snapshot["snapshot_id"], "song_id": song_id,
                "listeners": self.table.count(song_id), "rank": rank}



class ListenerSnapshots(Part):
    """The listener product's part of ``rankflow serve`` (``api.parts``): the process's
    :class:`SnapshotCache` (``state.cache``) and the rendered ranking bodies
    (``state.bodies``, ``api.rankings.BodyCache``)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.cache: SnapshotCache | None = None

    async def start(self, state: Any) -> None:
        from rankflow.api.rankings import BodyCache

        settings = self.settings
        self.cache = state.cache = SnapshotCache(settings.redis_url, settings.namespace, settings.poll_ms,
                                                 read_client(state))
        state.bodies = BodyCache()
        await self.cache.start()
        state.announcements.follow(self.cache.keys.generation, self.cache)

    async def stop(self) -> None:
        if self.cache is not None:
            await self.cache.stop()

    def health(self) -> Health:
        """The latest snapshot's id and age: stale (older than ``stale_after_ms``, or Redis no
        longer has it) degrades the service; none at all does not (another product may serve)."""
        cache = self.cache
        assert cache is not None
        snap = cache.snapshot
        age = None if snap is None else max(0, int(time.time() * 1000) - snap["published_at"])
        current = cache.fresh and age is not None and age <= self.settings.stale_after_ms
        return Health({"snapshot_id": None if snap is None else snap["snapshot_id"], "snapshot_age_ms": age,
                       "problem": cache.problem}, True if current else None if snap is None else False)

    def unready(self) -> str | None:
        """Unready without a snapshot, and while the one kept is not Redis's current one (Redis
        lost it, or could not be read at the last look): the routes then answer ``503``. An old
        snapshot that is still current is ready: a quiet input is no reason to stop serving."""
        cache = self.cache
        assert cache is not None
        if cache.snapshot is not None and cache.fresh:
            return None
        return cache.problem or f"no usable ranking in namespace {cache.keys.namespace!r}"

    def metrics(self) -> bytes:
        cache = self.cache
        assert cache is not None
        return (gauge("table_loads_total", "Whole count tables read from Redis (else changes)", cache.table_loads,
                      "counter")
                + gauge("table_songs", "Songs with listeners in this process's count table", len(cache.table)))
