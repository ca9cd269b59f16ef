"""``GET /boards/{game}/{board}/stream``: a board's top 10, live, as Server-Sent Events.

Contract: a ``board`` event at once with the board's top 10, then one whenever a new
snapshot changes it (its entries, ranks or scores, or the concrete board an alias
names), at most one a second per subscriber, coalescing what happened in between.
Each carries ``{snapshot_id, game_id, board, total_players, items}`` as ``GET
/boards/{game}/{board}/top?n=10`` does (``total_players`` as of that snapshot: a new
player far down does not by itself make a message), and the snapshot id as the SSE
``id``. An alias stream follows the alias as it moves. A board that does not exist
is a ``404`` before the stream starts (``400`` for an unknown board name, ``503`` while
Redis has no usable boards snapshot); one that stops existing while streamed (retention dropped its period) ends the stream with a
``gone`` event ``{"error": "no such board: ..."}``. A comment line every 15 s keeps
idle connections open; streams end at once when the server stops (``api.sse``). A client
reconnecting with ``Last-Event-ID`` gets no first event when the top 10 it last got (at that
snapshot id, known to this process: ``api.sse.History``) is still the board's, else the top 10.

Cheap for Redis whatever the number of subscribers: the process's watcher
(``api.board_watch.BoardWatch``, or the board mirror with ``--board-index memory``)
wakes the streams when it sees a new snapshot, and the
subscribers of one board share one read of its top 10 (``api.shared_cache``).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from rankflow.api import sse
from rankflow.api.boards import ERRORS, UNAVAILABLE, WHY, board_path, game_path
from rankflow.api.responses import UsageErrorsAre400
from rankflow.api.schemas import text
from rankflow.api.shared_cache import SharedTops
from rankflow.api.watch import Watched
from rankflow.connectors.board_read import NoBoardsSnapshot, NoSuchBoard

log = logging.getLogger("rankflow.api")

router = APIRouter(route_class=UsageErrorsAre400)  # its path never fails FastAPI's checks: no 422

TOP = 10


def board_message(top: dict[str, Any]) -> bytes:
    return b"event: board\nid: %d\ndata: %s\n\n" % (top["snapshot_id"] or 0, orjson.dumps(top))


def shown(top: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """What a subscriber sees change: the concrete board and its top entries."""
    return top["board"], top["items"]


class BoardFeed:
    """One subscriber's :class:`api.sse.Feed`: ``first`` is the top 10 read at ``seen``,
    the watcher's version before the read."""

    def __init__(self, watch: Watched, tops: SharedTops, game: str, board: str, first: dict[str, Any],
                 seen: Hashable | None, history: sse.History | None = None) -> None:
        self.watch, self.tops, self.game, self.board = watch, tops, game, board
        self.sent, self.seen = shown(first), seen
        self.history = history or sse.History()
        self.history.record((game, board), first["snapshot_id"] or 0, self.sent)

    def changed(self) -> bool:
        return self.watch.version != self.seen

    async def message(self) -> bytes | None:
        self.seen = self.watch.version
        try:
            top = await self.tops.top(self.game, self.board, TOP)
        except NoSuchBoard as exc:
            raise sse.StreamEnds(b"event: gone\ndata: %s\n\n" % orjson.dumps({"error": str(exc)})) from None
        except NoBoardsSnapshot:
            return None  # Redis lost its data: not gone, the next snapshot says
        except UNAVAILABLE as exc:
            log.warning("board stream %s/%s: %r", self.game, self.board, exc)
            return None  # the next snapshot tries again
        now = shown(top)
        self.history.record((self.game, self.board), top["snapshot_id"] or 0, now)
        if now == self.sent:
            return None
        self.sent = now
        return board_message(top)


@router.get("/boards/{game:game}/{board}/stream", summary="Server-Sent Events: a board's top 10 when it changes",
            response_class=StreamingResponse,
            responses={200: text("text/event-stream", "`board` events: the top 10 as /top?n=10 gives it, at once "
                                                      "and whenever a snapshot changes it; `gone` when it is dropped"),
                       **WHY})
async def stream_board(request: Request, game: str = game_path(), board: str = board_path()) -> Response:
    watch: Watched = request.app.state.board_changes
    seen = watch.version
    tops: SharedTops = request.app.state.board_tops
    first = await ERRORS.ask(request.app.state.boards, lambda _: tops.top(game, board, TOP))
    if isinstance(first, Response):
        return first
    history = sse.history(request.app.state, "boards")
    resumed = history.at((game, board), sse.last_event_id(request))  # what the client last got, if known
    feed = BoardFeed(watch, tops, game, board, first, seen, history)
    return sse.event_stream(request, watch, feed, None if resumed == feed.sent else board_message(first))
