"""What the service knows of the boards' snapshots without asking Redis per request.

:class:`BoardWatch`, one background task per process, asks Redis every ``poll_ms``
for the boards' generation and snapshot id (one ``MGET``) and wakes the streams when
they change. :class:`TopCache` keeps, for the snapshot the watcher last saw, each
board's top N that was asked for: the first request reads it (one script call), every
other request and stream of that snapshot shares the read. So the top N, which
everyone asks for, costs Redis one call per board, N and snapshot; an answer is at
most one poll interval behind the newest snapshot, as ``GET /rankings`` is, and still
wholly from one snapshot. One player's rank is asked of Redis each time: it differs
per request.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

import redis
import redis.asyncio as aioredis

from rankflow.api.store import Polling
from rankflow.connectors.board_read import AsyncBoardReader
from rankflow.connectors.redis_keys import Keys, boards_namespace

log = logging.getLogger("rankflow.api")

Version = tuple[int, bytes | None]
"""The boards' generation and snapshot id: a new one may change any board."""

MAX_CACHED_TOPS = 10_000
"""Top-N answers kept for one snapshot (boards x the n asked for); past this they start over."""


class BoardWatch(Polling):
    """Notices new board snapshots for the whole process, polling once for all."""

    name = "board watcher"

    def __init__(self, client: aioredis.Redis, namespace: str, poll_ms: int) -> None:
        super().__init__()
        self.client = client
        self.keys = Keys(boards_namespace(namespace))
        self.poll_s = poll_ms / 1000
        self.version: Version | None = None  # None: not read yet, or Redis unreachable
        self._generation = 0

    def start(self) -> None:
        self._start_polling()

    async def stop(self) -> None:
        await self._stop_polling()

    async def _poll(self) -> None:
        while not self._stopping:
            try:
                await self.refresh()
            except (redis.RedisError, OSError) as exc:
                log.debug("board watch: %r", exc)
                self.version = None  # nothing cached is known to be current: ask Redis
            await asyncio.sleep(self.poll_s)

    async def refresh(self) -> None:
        generation, sid = await self.client.mget(self.keys.generation,
                                                 self.keys.of_generation(self._generation).snapshot_id)
        if int(generation or 0) != self._generation:
            self._generation = int(generation)
            self.version = None
            return  # the new generation's snapshot id at the next poll
        if (self._generation, sid) != self.version:
            self.version = (self._generation, sid)
            self._announce_change()


class Watched(Protocol):
    """What tells a :class:`TopCache` and the streams that the snapshot changed: the
    :class:`BoardWatch`, or the board mirror (``api.board_mirror``) with ``--board-index memory``."""

    version: Version | None

    async def wait_for_change(self, timeout: float) -> bool: ...


class TopCache:
    """Each board's top N of the watcher's current snapshot, read once and shared."""

    def __init__(self, reader: Any, watch: Watched) -> None:
        self.reader = reader
        self.watch = watch
        self._version: Version | None = None
        self._reads: dict[tuple[str, str, int], asyncio.Future[dict[str, Any]]] = {}

    async def top(self, game: str, board: str, n: int) -> dict[str, Any]:
        version = self.watch.version
        if version is None:
            return await self.reader.top(game, board, n)
        if version != self._version or len(self._reads) >= MAX_CACHED_TOPS:
            self._version, self._reads = version, {}
        key = (game, board, n)
        read = self._reads.get(key)
        if read is None:
            read = self._reads[key] = asyncio.ensure_future(self.reader.top(game, board, n))
            read.add_done_callback(self._forget_failure(key))
        return await asyncio.shield(read)  # a request that leaves must not cancel the others' read

    def _forget_failure(self, key: tuple[str, str, int]) -> Any:
        """Only answers are kept: a failed read (no such board, Redis down) is asked again."""
        def done(read: asyncio.Future[dict[str, Any]]) -> None:
            if read.cancelled() or read.exception() is not None:  # retrieved: never "never retrieved"
                if self._reads.get(key) is read:
                    del self._reads[key]
        return done
