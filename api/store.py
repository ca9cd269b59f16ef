"""What the HTTP service reads from Redis, and the in-process cache in front of it.

Readers never touch the flow: everything comes from the keys the publisher writes
(``connectors.redis_snapshots``). A background task (:class:`SnapshotCache`) asks
Redis every ``poll_ms`` for the current snapshot id, a few bytes, and fetches and
parses the snapshot only when the id changed; requests for rankings are then
answered from memory, all items of a response from one snapshot. When Redis has no
usable ranking the cache keeps the last one it saw, so it can be served marked
stale. One song's count and rank need the full count table, so they are read per
request, atomically with the id of the snapshot they belong to.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
import redis
import redis.asyncio as aioredis

from connectors.redis_snapshots import SONG_LUA, SONGS_LUA, Keys, song_view

log = logging.getLogger("rankflow.api")

REFRESH_SONGS_MAX = 10_000

CURRENT_ID_LUA = """
local g = redis.call('GET', KEYS[1]) or '0'
return {g, redis.call('GET', ARGV[1] .. ':g' .. g .. ':snapshot_id')}
"""


class SnapshotCache:
    def __init__(self, url: str, namespace: str, poll_ms: int = 100) -> None:
        self.keys = Keys(namespace)
        self.client = aioredis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
        self.poll_s = poll_ms / 1000
        self.snapshot: dict[str, Any] | None = None
        self.fresh = False  # the cached snapshot is Redis's current one
        self.problem: str | None = "not read yet"
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._songs: dict[str, dict[str, Any] | None] = {}  # answers for the cached snapshot id
        self._songs_id: int | None = None
        self._in_flight: dict[str, asyncio.Future[list[Any]]] = {}
        self.song_reads = {"snapshot": 0, "cache": 0, "redis": 0}  # where song answers came from
        self._top: dict[str, dict[str, Any]] = {}
        self._top_id: int | None = None
        self._song_script = self.client.register_script(SONG_LUA)
        self._songs_script = self.client.register_script(SONGS_LUA)
        self._current_script = self.client.register_script(CURRENT_ID_LUA)

    async def start(self) -> None:
        await self.refresh()
        self._task = asyncio.create_task(self._poll(), name="snapshot-cache")

    async def stop(self) -> None:
        """Stop polling and close the Redis connections, in bounded time.

        Cancelling alone is not enough on Python 3.11: its ``asyncio.wait_for`` (which
        redis-py uses for socket timeouts) swallows a cancellation that arrives just
        as the awaited call completes, and the poll loop would go on forever (this hung
        a CI run in the test client's shutdown). So the loop also checks a flag, and
        the waits here never re-cancel: ``asyncio.wait`` only waits.
        """
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            _, pending = await asyncio.wait({self._task}, timeout=5)
            if pending:
                log.warning("the snapshot poller did not stop in time")
        closing = asyncio.ensure_future(self.client.aclose())
        _, pending = await asyncio.wait({closing}, timeout=5)
        if pending:
            log.warning("Redis connections did not close in time")

    async def _poll(self) -> None:
        while not self._stopping:
            await asyncio.sleep(self.poll_s)
            if not self._stopping:
                await self.refresh()

    async def refresh(self) -> None:
        try:
            generation, sid = await self._current_script(keys=[self.keys.generation], args=[self.keys.tag])
            if sid is None:
                self._lost(f"no usable ranking in namespace {self.keys.namespace!r}")
            elif self.snapshot is None or not self.fresh or int(sid) != self.snapshot["snapshot_id"]:
                raw = await self.client.get(self.keys.of_generation(int(generation)).snapshot)
                if raw is None:
                    self._lost(f"no usable ranking in namespace {self.keys.namespace!r}")
                else:
                    snapshot = orjson.loads(raw)
                    # Read the known songs for this snapshot first, then switch both at once,
                    # so a request never pairs a snapshot with another snapshot's songs.
                    songs = await self._read_known_songs(snapshot["snapshot_id"])
                    self._store(snapshot)
                    if songs is not None:
                        self._songs, self._songs_id = songs, snapshot["snapshot_id"]
        except (redis.RedisError, OSError) as exc:
            self._lost(f"cannot reach Redis: {exc}")

    def _store(self, snapshot: dict[str, Any]) -> None:
        changed = self.snapshot is None or snapshot["snapshot_id"] != self.snapshot["snapshot_id"]
        self.snapshot, self.fresh, self.problem = snapshot, True, None
        if changed:
            self._changed.set()
            self._changed = asyncio.Event()

    async def _read_known_songs(self, snapshot_id: int) -> dict[str, dict[str, Any] | None] | None:
        """The songs readers asked for, re-read for a new snapshot in one atomic call.

        Requests for them then never wait for Redis; a song asked for the first time
        is read on its request and joins the set. None if Redis is already past
        ``snapshot_id`` (the next refresh reads the newer one).
        """
        songs = list(self._songs)[:REFRESH_SONGS_MAX]
        if not songs:
            return {}
        reply = await self._songs_script(keys=[self.keys.generation], args=[self.keys.tag, *songs])
        if reply[0] is None or int(reply[0]) != snapshot_id:
            return None
        return {song: song_view([reply[0], reply[1 + 2 * i], reply[2 + 2 * i]], song)
                for i, song in enumerate(songs)}

    def _lost(self, problem: str) -> None:
        if self.problem != problem:
            log.warning("%s", problem)
        self.fresh, self.problem = False, problem

    async def wait_for_change(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    async def song(self, song_id: str) -> dict[str, Any] | None:
        """One song in the latest snapshot.

        A song in the snapshot's top ``K_max`` is answered from the cached snapshot
        (its rank and count are there); any other song from the full count table,
        remembering the answer until the snapshot changes.
        """
        current = self.snapshot["snapshot_id"] if self.snapshot is not None and self.fresh else None
        if current is not None:
            if self._top_id != current:
                self._top = {it["song_id"]: it for it in self.snapshot["items"]}  # type: ignore[index]
                self._top_id = current
            item = self._top.get(song_id)
            if item is not None:
                self.song_reads["snapshot"] += 1
                return {"snapshot_id": current, "song_id": song_id, "listeners": item["listeners"],
                        "rank": item["rank"]}
        if current is not None and current == self._songs_id and song_id in self._songs:
            self.song_reads["cache"] += 1
            return self._songs[song_id]
        self.song_reads["redis"] += 1
        reply = await self._read_song(song_id)
        view = song_view(reply, song_id)
        read_id = int(reply[0]) if reply and reply[0] is not None else None
        if read_id is not None and read_id == self._songs_id and len(self._songs) < REFRESH_SONGS_MAX:
            self._songs[song_id] = view
        return view

    async def _read_song(self, song_id: str) -> list[Any]:
        """One Redis read per song at a time: concurrent requests for it share the answer."""
        pending = self._in_flight.get(song_id)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self._in_flight[song_id] = future
        try:
            reply = await self._song_script(keys=[self.keys.generation], args=[self.keys.tag, song_id])
            future.set_result(reply)
            return reply
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters get it, nobody else must
            raise
        finally:
            del self._in_flight[song_id]

    async def ping(self) -> bool:
        try:
            return bool(await self.client.ping())
        except (redis.RedisError, OSError):
            return False
