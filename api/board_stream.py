"""``GET /boards/{game}/{board}/stream``: a board's top 10, live, as Server-Sent Events.

Contract: a ``board`` event at once with the board's top 10, then one whenever a new
snapshot changes it (its entries, ranks or scores, or the concrete board an alias
names), at most one a second per subscriber, coalescing what happened in between.
Each carries ``{snapshot_id, game_id, board, total_players, items}`` as ``GET
/boards/{game}/{board}/top?n=10`` does (``total_players`` as of that snapshot: a new
player far down does not by itself make a message), and the snapshot id as the SSE
``id``. An alias stream follows the alias as it moves. A board that does not exist
is a ``404`` before the stream starts (``400`` for an unknown board name); one that
stops existing while streamed (retention dropped its period) ends the stream with a
``gone`` event ``{"error": "no such board: ..."}``. A comment line every 15 s keeps
idle connections open; streams end at once when the server stops.

Cheap for Redis whatever the number of subscribers: one background task per process
(:class:`BoardWatch`) asks Redis every ``poll_ms`` for the boards' generation and
snapshot id, one ``MGET``; only when they changed do the streams read their board,
and the subscribers of one board share that read (:class:`SharedTops`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import redis
import redis.asyncio as aioredis
from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from rankflow.api.boards import ERRORS, ask
from rankflow.connectors.board_read import AsyncBoardReader, NoSuchBoard
from rankflow.connectors.redis_keys import Keys, boards_namespace

log = logging.getLogger("rankflow.api")

router = APIRouter()

TOP = 10
STREAM_MIN_INTERVAL_S = 1.0
KEEPALIVE_S = 15.0
DISCONNECT_CHECK_S = 1.0  # a gone client is noticed within this, even when nothing changes

Version = tuple[int, bytes | None]
"""The boards' generation and snapshot id: a new one may change any board."""


class BoardWatch:
    """Notices new board snapshots for every stream of the process, polling once for all.

    Started by the first stream, stopped with the service.
    """

    def __init__(self, client: aioredis.Redis, namespace: str, poll_ms: int) -> None:
        self.client = client
        self.keys = Keys(boards_namespace(namespace))
        self.poll_s = poll_ms / 1000
        self.version: Version | None = None
        self._generation = 0
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def start(self) -> None:
        if self._task is None and not self._stopping:
            self._task = asyncio.create_task(self._poll(), name="board-watch")

    async def stop(self) -> None:
        """Bounded, without re-cancelling (see ``api.store.SnapshotCache.stop``)."""
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            _, pending = await asyncio.wait({self._task}, timeout=5)
            if pending:
                log.warning("the board watcher did not stop in time")

    async def _poll(self) -> None:
        while not self._stopping:
            try:
                await self.refresh()
            except (redis.RedisError, OSError) as exc:
                log.debug("board watch: %r", exc)  # the streams keep their last message meanwhile
            await asyncio.sleep(self.poll_s)

    async def refresh(self) -> None:
        generation, sid = await self.client.mget(self.keys.generation,
                                                 self.keys.of_generation(self._generation).snapshot_id)
        if int(generation or 0) != self._generation:
            self._generation = int(generation)
            return  # the new generation's snapshot id at the next poll
        if (self._generation, sid) != self.version:
            self.version = (self._generation, sid)
            self._changed.set()
            self._changed = asyncio.Event()

    async def wait_for_change(self, timeout: float) -> bool:
        """True if a new snapshot was noticed within ``timeout`` (``asyncio.wait``: see
        ``SnapshotCache.wait_for_change``)."""
        waiter = asyncio.ensure_future(self._changed.wait())
        try:
            done, _ = await asyncio.wait({waiter}, timeout=timeout)
        finally:
            waiter.cancel()
        return bool(done)


class SharedTops:
    """One top-10 read per board and snapshot version, awaited by all its subscribers."""

    def __init__(self, reader: AsyncBoardReader) -> None:
        self.reader = reader
        self._reads: dict[tuple[str, str], tuple[Version | None, asyncio.Future[dict[str, Any]]]] = {}

    async def top(self, game: str, board: str, version: Version | None) -> dict[str, Any]:
        key = (game, board)
        cached = self._reads.get(key)
        if cached is None or cached[0] != version:
            read = asyncio.ensure_future(self.reader.top(game, board, TOP))
            read.add_done_callback(_retrieve)
            self._reads = {k: v for k, v in self._reads.items() if v[0] == version}  # older versions are done with
            self._reads[key] = cached = (version, read)
        return await asyncio.shield(cached[1])  # a subscriber leaving must not cancel the others' read


def _retrieve(future: asyncio.Future[Any]) -> None:
    """A failed read whose subscribers all left is not an "exception never retrieved"."""
    if not future.cancelled():
        future.exception()


def board_message(top: dict[str, Any]) -> bytes:
    return b"event: board\nid: %d\ndata: %s\n\n" % (top["snapshot_id"] or 0, orjson.dumps(top))


def shown(top: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """What a subscriber sees change: the concrete board and its top entries."""
    return top["board"], top["items"]


async def board_events(request: Request, game: str, board: str, first: dict[str, Any],
                       seen: Version | None) -> AsyncIterator[bytes]:
    """``first`` is the top 10 read at ``seen``, the watcher's version before the read."""
    watch: BoardWatch = request.app.state.board_watch
    tops: SharedTops = request.app.state.board_tops
    stopping = request.app.state.stopping
    yield board_message(first)
    sent, sent_at, quiet_since = shown(first), time.monotonic(), time.monotonic()
    while not stopping.is_set() and not await request.is_disconnected():
        if watch.version != seen:
            wait = sent_at + STREAM_MIN_INTERVAL_S - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)  # coalesce: read the newest after it
            seen = watch.version
            try:
                top = await tops.top(game, board, seen)
            except NoSuchBoard as exc:
                yield b"event: gone\ndata: %s\n\n" % orjson.dumps({"error": str(exc)})
                return
            except (redis.RedisError, OSError) as exc:
                log.warning("board stream %s/%s: %r", game, board, exc)
                continue  # the next snapshot tries again
            if shown(top) != sent:
                yield board_message(top)
                sent, sent_at = shown(top), time.monotonic()
            continue
        if await watch.wait_for_change(DISCONNECT_CHECK_S):
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= KEEPALIVE_S:
            yield b": keepalive\n\n"
            quiet_since = time.monotonic()


@router.get("/boards/{game}/{board}/stream", summary="Server-Sent Events: a board's top 10 when it changes",
            response_class=StreamingResponse, responses={k: ERRORS[k] for k in (400, 404, 503)})
async def stream_board(request: Request, game: str, board: str) -> Response:
    watch: BoardWatch = request.app.state.board_watch
    watch.start()
    seen = watch.version
    first = await ask(request, lambda reader: reader.top(game, board, TOP))
    if isinstance(first, Response):
        return first
    return StreamingResponse(board_events(request, game, board, first, seen),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
