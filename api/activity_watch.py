"""What the service knows of the activity rankings' snapshots without asking Redis per request.

:class:`ActivityWatch`, one background task per process (an ``api.watch.VersionWatch``),
asks the reader at each announced publish (``api.announce``), and at least every
``poll_ms``, for the current snapshot (one small script call that
sends the snapshot document only when its id moved) and wakes the streams when the
generation or the snapshot id changes; ``api.shared_cache.SharedTops`` shares, per
snapshot, each streamed workspace's top among its subscribers.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import redis

from rankflow.api.parts import Health, Part, close_client, read_client
from rankflow.api.watch import VersionWatch
from rankflow.connectors.activity_read import ActivityMoving, AsyncActivityReader, NoSnapshot
from rankflow.connectors.snapshot_age import is_stale

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from rankflow.api.settings import Settings

log = logging.getLogger("rankflow.api")

UNAVAILABLE = (redis.RedisError, OSError, ActivityMoving)
"""What makes an activity query a ``503`` besides :class:`NoSnapshot`: Redis cannot be
reached, or a rebuild kept switching the generation during the query."""

Version = tuple[int, int]
"""The activity generation and snapshot id: a new one may change any workspace."""


class ActivityWatch(VersionWatch[Version]):
    """Notices new activity snapshots for the whole process, polling once for all."""

    name = "activity watcher"

    def __init__(self, reader: AsyncActivityReader, poll_ms: int) -> None:
        super().__init__(poll_ms)
        self.reader = reader

    published_at: int | None = None
    """The publish time of :attr:`version`'s snapshot (read with it): its answers' cache validators."""

    async def read_version(self) -> Version:
        snapshot = await self.reader.snapshot()
        self.published_at = snapshot.get("published_at")
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


def held(state: Any) -> tuple[int, int, bool] | None:
    """The activity snapshot the watcher saw last, its publish time and whether its answers say
    ``"stale": true`` now (``api.http_cache``); None: none."""
    watch: ActivityWatch = state.activity_watch
    version, at = watch.version, watch.published_at
    return None if version is None or at is None else (version[1], at, is_stale(at, state.settings.stale_after_ms))


class ActivityParts(Part):
    """The activity product's part of ``rankflow serve`` (``api.parts``): the reader
    (``state.activity``), the process's :class:`ActivityWatch` (``state.activity_watch``) and
    the shared tops of the streams (``state.activity_tops``)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.client: aioredis.Redis | None = None
        self.watch: ActivityWatch | None = None

    async def start(self, state: Any) -> None:
        from rankflow.api.shared_cache import SharedTops

        settings = self.settings
        self.client = read_client(state)
        state.activity = reader = AsyncActivityReader(self.client, settings.namespace)
        self.watch = state.activity_watch = ActivityWatch(reader, settings.poll_ms)
        self.watch.start()
        state.announcements.follow(reader.hint.keys.generation, self.watch)
        state.activity_tops = SharedTops(reader, self.watch, stale_after_ms=settings.stale_after_ms)

    async def stop(self) -> None:
        if self.watch is not None:
            await self.watch.stop()
        await close_client(self.client)

    def health(self) -> Health:
        """The activity snapshot's id: serving when there is one."""
        assert self.watch is not None
        version = self.watch.version
        activity_id = None if version is None else version[1]
        return Health({"activity_snapshot_id": activity_id}, True if activity_id is not None else None)

    def unready(self) -> str | None:
        """Unready while the watcher knows no activity snapshot (its reason: the reader's "no usable ...")."""
        watch = self.watch
        assert watch is not None
        if watch.version is not None:
            return None
        return watch.problem or f"no usable activity snapshot in namespace {self.settings.namespace!r}"
