"""What the service knows of the boards' snapshots without asking Redis per request.

:class:`BoardWatch`, one background task per process (an ``api.watch.VersionWatch``),
asks Redis for the boards' generation and snapshot id (one ``MGET``) at each announced
publish (``api.announce``) and at least every ``poll_ms``,
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
from typing import TYPE_CHECKING, Any, cast

import redis
import redis.asyncio as aioredis

from rankflow.api.parts import Health, Part, close_client, read_client, gauge
from rankflow.api.watch import VersionWatch
from rankflow.connectors.board_read import no_snapshot
from rankflow.connectors.read_hint import GenerationHint
from rankflow.connectors.redis_keys import Keys, boards_namespace
from rankflow.connectors.redis_replies import Values
from rankflow.connectors.snapshot_age import is_stale, published

if TYPE_CHECKING:
    from rankflow.api.board_mirror import BoardMirror
    from rankflow.api.settings import Settings

log = logging.getLogger("rankflow.api")

Version = tuple[int, bytes | None]
"""The boards' generation and snapshot id: a new one may change any board."""


class BoardWatch(VersionWatch[Version]):
    """Notices new board snapshots for the whole process, polling once for all."""

    name = "board watcher"

    def __init__(self, client: aioredis.Redis, namespace: str, poll_ms: int) -> None:
        super().__init__(poll_ms)
        self.client = client
        self.hint = GenerationHint(Keys(boards_namespace(namespace)))

    published_at: int | None = None
    """The publish time of :attr:`version`'s snapshot (read with it): its answers' cache validators."""

    async def read_version(self) -> Version | None:
        keys = self.hint.keys
        current = keys.of_generation(self.hint.generation)
        generation, sid, at = cast(Values, await self.client.mget(keys.generation, current.snapshot_id,
                                                                  current.published_at))
        self.published_at = published(at)
        if self.hint.moved(int(generation or 0)):
            return None  # the new generation's snapshot id at the next poll
        if sid is None:  # no usable snapshot (nothing published, Redis lost its data): nothing is current
            self.problem = no_snapshot(keys.namespace)  # what /readyz says, as the board routes' 503
            return None
        return self.hint.generation, sid

    def poll_failed(self, exc: Exception) -> bool:
        if not isinstance(exc, (redis.RedisError, OSError)):
            raise exc
        log.debug("board watch: %r", exc)
        self.lost(f"cannot reach Redis: {exc!r}")  # nothing cached is known to be current: ask Redis
        return False


def snapshot_id(version: tuple[Any, ...] | None) -> int | None:
    """The snapshot id of a boards version, the watcher's or the mirror's (None: none known)."""
    return None if version is None or version[1] is None else int(version[1])


def held(state: Any) -> tuple[int, int, bool] | None:
    """The boards' snapshot the service answers from now, its publish time and whether its answers
    say ``"stale": true`` now (``api.http_cache``): the mirror's with ``--board-index memory``, else
    the watcher's; None: none known."""
    changes = state.board_changes
    sid, at = snapshot_id(changes.version), changes.published_at
    return None if sid is None or at is None else (sid, at, is_stale(at, state.settings.stale_after_ms))


class BoardParts(Part):
    """The boards product's part of ``rankflow serve`` (``api.parts``): the board reader
    (``state.boards``), the process's :class:`BoardWatch` (``state.board_watch``), with
    ``--board-index memory`` the in-memory copy (``state.board_mirror``, else None) that then
    answers the queries and wakes the streams (``state.board_changes``), and the shared tops
    (``state.board_tops``)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.client: aioredis.Redis | None = None
        self.watch: BoardWatch | None = None
        self.mirror: BoardMirror | None = None

    async def start(self, state: Any) -> None:
        from rankflow.api.board_mirror import BoardMirror, MirroredBoards
        from rankflow.api.shared_cache import SharedTops
        from rankflow.connectors.board_read import AsyncBoardReader

        settings = self.settings
        self.client = client = read_client(state)
        state.boards = AsyncBoardReader(client, settings.namespace)
        self.watch = state.board_watch = state.board_changes = BoardWatch(client, settings.namespace,
                                                                          settings.poll_ms)
        self.watch.start()
        channel = self.watch.hint.keys.generation
        state.announcements.follow(channel, self.watch)
        state.board_mirror = None
        if settings.board_index == "memory":
            self.mirror = state.board_mirror = mirror = BoardMirror(client, settings.namespace, settings.poll_ms)
            mirror.start()
            state.announcements.follow(channel, mirror)
            state.boards = MirroredBoards(mirror, state.boards)
            state.board_changes = mirror  # streams wake when the mirror serves a new snapshot
        at_hand = None if self.mirror is None else self.mirror.top_at_hand
        state.board_tops = SharedTops(state.boards, state.board_changes, stale_after_ms=settings.stale_after_ms,
                                      at_hand=at_hand)

    async def stop(self) -> None:
        if self.watch is not None:
            await self.watch.stop()
        if self.mirror is not None:
            await self.mirror.stop()
        await close_client(self.client)

    def health(self) -> Health:
        """The boards' snapshot id (serving when there is one) and the index; the mirror's state
        informs, never degrades: until it serves, Redis answers the board queries."""
        assert self.watch is not None
        boards_id = snapshot_id(self.watch.version)
        informs = {}
        mirror = self.mirror
        if mirror is not None:
            informs["board_mirror"] = {"ready": mirror.ready, "problem": mirror.problem,
                                       "snapshot_id": snapshot_id(mirror.version)}
        return Health({"boards_snapshot_id": boards_id, "board_index": self.settings.board_index},
                      True if boards_id is not None else None, informs)

    def unready(self) -> str | None:
        """Unready while the watcher knows no boards snapshot id (``no usable boards snapshot``)."""
        watch = self.watch
        assert watch is not None
        if snapshot_id(watch.version) is not None:
            return None
        return watch.problem or no_snapshot(watch.hint.keys.namespace)

    def metrics(self) -> bytes:
        mirror = self.mirror
        if mirror is None:
            return b""
        return (gauge("board_loads_total", "Whole loads of the boards into memory (else changes)", mirror.loads,
                      "counter")
                + gauge("board_entries", "Board entries held in memory (--board-index memory)", mirror.entries()))
