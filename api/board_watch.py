"""What the service knows of the boards' snapshots without asking Redis per request.

:class:`BoardWatch`, one background task per process (an ``api.watch.VersionWatch``),
asks Redis every ``poll_ms`` for the boards' generation and snapshot id (one ``MGET``)
and wakes the streams when they change. ``api.shared_cache.SharedTops`` keeps, for the
snapshot the watcher last saw, each board's top N that was asked for: the first request
reads it (one script call), every other request and stream of that snapshot shares the
read. So the top N, which everyone asks for, costs Redis one call per board, N and
snapshot; an answer is at most one poll interval behind the newest snapshot, as ``GET
/rankings`` is, and still wholly from one snapshot. One player's rank is asked of Redis
each time: it differs per request.
"""

from __future__ import annotations

import logging
from typing import cast

import redis
import redis.asyncio as aioredis

from rankflow.api.watch import VersionWatch
from rankflow.connectors.read_hint import GenerationHint
from rankflow.connectors.redis_keys import Keys, boards_namespace
from rankflow.connectors.redis_replies import Values

log = logging.getLogger("rankflow.api")

Version = tuple[int, bytes | None]
"""The boards' generation and snapshot id: a new one may change any board."""


class BoardWatch(VersionWatch):
    """Notices new board snapshots for the whole process, polling once for all."""

    name = "board watcher"

    def __init__(self, client: aioredis.Redis, namespace: str, poll_ms: int) -> None:
        super().__init__(poll_ms)
        self.client = client
        self.hint = GenerationHint(Keys(boards_namespace(namespace)))

    async def read_version(self) -> Version | None:
        keys = self.hint.keys
        snapshot_id = keys.of_generation(self.hint.generation).snapshot_id
        generation, sid = cast(Values, await self.client.mget(keys.generation, snapshot_id))
        if self.hint.moved(int(generation or 0)):
            return None  # the new generation's snapshot id at the next poll
        return self.hint.generation, sid

    def poll_failed(self, exc: Exception) -> bool:
        if not isinstance(exc, (redis.RedisError, OSError)):
            raise exc
        log.debug("board watch: %r", exc)
        self.lost(f"cannot reach Redis: {exc!r}")  # nothing cached is known to be current: ask Redis
        return False
