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
import time
from typing import Any

import orjson
import redis
import redis.asyncio as aioredis

from connectors.redis_snapshots import SONG_LUA, Keys, song_view

log = logging.getLogger("rankflow.api")

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
        self.checked_at = 0.0
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.refresh()
        self._task = asyncio.create_task(self._poll(), name="snapshot-cache")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        await self.client.aclose()

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.poll_s)
            await self.refresh()

    async def refresh(self) -> None:
        try:
            generation, sid = await self.client.eval(CURRENT_ID_LUA, 1, self.keys.generation, self.keys.tag)
            if sid is None:
                self._lost(f"no usable ranking in namespace {self.keys.namespace!r}")
            elif self.snapshot is None or not self.fresh or int(sid) != self.snapshot["snapshot_id"]:
                raw = await self.client.get(self.keys.of_generation(int(generation)).snapshot)
                if raw is None:
                    self._lost(f"no usable ranking in namespace {self.keys.namespace!r}")
                else:
                    self._store(orjson.loads(raw))
            self.checked_at = time.time()
        except (redis.RedisError, OSError) as exc:
            self._lost(f"cannot reach Redis: {exc}")

    def _store(self, snapshot: dict[str, Any]) -> None:
        changed = self.snapshot is None or snapshot["snapshot_id"] != self.snapshot["snapshot_id"]
        self.snapshot, self.fresh, self.problem = snapshot, True, None
        if changed:
            self._changed.set()
            self._changed = asyncio.Event()

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
        reply = await self.client.eval(SONG_LUA, 1, self.keys.generation, self.keys.tag, song_id)
        return song_view(reply, song_id)

    async def ping(self) -> bool:
        try:
            return bool(await self.client.ping())
        except (redis.RedisError, OSError):
            return False
