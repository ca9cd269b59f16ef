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

Cheap for Redis whatever the number of subscribers: the process's watcher
(``api.board_watch.BoardWatch``, or the board mirror with ``--board-index memory``)
wakes the streams when it sees a new snapshot, and the
subscribers of one board share one read of its top 10 (``TopCache``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from rankflow.api.board_watch import TopCache, Version, Watched
from rankflow.api.boards import ERRORS, UNAVAILABLE, UsageErrorsAre400, ask
from rankflow.connectors.board_read import NoSuchBoard

log = logging.getLogger("rankflow.api")

router = APIRouter(route_class=UsageErrorsAre400)  # its path never fails FastAPI's checks: no 422

TOP = 10
STREAM_MIN_INTERVAL_S = 1.0
KEEPALIVE_S = 15.0
DISCONNECT_CHECK_S = 1.0  # a gone client is noticed within this, even when nothing changes

def board_message(top: dict[str, Any]) -> bytes:
    return b"event: board\nid: %d\ndata: %s\n\n" % (top["snapshot_id"] or 0, orjson.dumps(top))


def shown(top: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """What a subscriber sees change: the concrete board and its top entries."""
    return top["board"], top["items"]


async def board_events(request: Request, game: str, board: str, first: dict[str, Any],
                       seen: Version | None) -> AsyncIterator[bytes]:
    """``first`` is the top 10 read at ``seen``, the watcher's version before the read."""
    watch: Watched = request.app.state.board_changes
    tops: TopCache = request.app.state.board_tops
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
                top = await tops.top(game, board, TOP)
            except NoSuchBoard as exc:
                yield b"event: gone\ndata: %s\n\n" % orjson.dumps({"error": str(exc)})
                return
            except UNAVAILABLE as exc:
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


@router.get("/boards/{game:game}/{board}/stream", summary="Server-Sent Events: a board's top 10 when it changes",
            response_class=StreamingResponse, responses={k: ERRORS[k] for k in (400, 404, 503)})
async def stream_board(request: Request, game: str, board: str) -> Response:
    seen = request.app.state.board_changes.version
    tops: TopCache = request.app.state.board_tops
    first = await ask(request, lambda _: tops.top(game, board, TOP))
    if isinstance(first, Response):
        return first
    return StreamingResponse(board_events(request, game, board, first, seen),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
