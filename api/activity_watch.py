"""What the service knows of the activity rankings' snapshots without asking Redis per request.

:class:`ActivityWatch`, one background task per process (an ``api.watch.VersionWatch``),
asks the reader every ``poll_ms`` for the current snapshot (one small script call that
sends the snapshot document only when its id moved) and wakes the streams when the
generation or the snapshot id changes; ``api.shared_cache.SharedTops`` shares, per
snapshot, each streamed workspace's top among its subscribers.
"""

from __future__ import annotations

import logging

import redis

from rankflow.api.watch import VersionWatch
from rankflow.connectors.activity_read import ActivityMoving, AsyncActivityReader, NoSnapshot

log = logging.getLogger("rankflow.api")

UNAVAILABLE = (redis.RedisError, OSError, ActivityMoving)
"""What makes an activity query a ``503`` besides :class:`NoSnapshot`: Redis cannot be
reached, or a rebuild kept switching the generation during the query."""

Version = tuple[int, int]
"""The activity generation and snapshot id: a new one may change any workspace."""


class ActivityWatch(VersionWatch):
    """Notices new activity snapshots for the whole process, polling once for all."""

    name = "activity watcher"

    def __init__(self, reader: AsyncActivityReader, poll_ms: int) -> None:
        super().__init__(poll_ms)
        self.reader = reader

    async def read_version(self) -> Version:
        snapshot = await self.reader.snapshot()
        return self.reader.hint.generation, snapshot["snapshot_id"]

    def poll_failed(self, exc: Exception) -> bool:
        if isinstance(exc, NoSnapshot):
            self.lost(str(exc))
        elif isinstance(exc, UNAVAILABLE):
            self.lost(f"cannot reach Redis: {exc}")
        else:  # the watcher must outlive one bad read
            log.exception("activity watch")
            self.lost(f"cannot follow the activity snapshots: {exc!r}")
        return False
