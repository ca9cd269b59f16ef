"""``GET /boards/{game}/{board}/stream``: a board's top 10, live, as Server-Sent Events.

Contract: a ``board`` event at once with the board's top 10 (``full: true``, every entry in
``changed``), then one whenever a new snapshot changes it (its entries, ranks or scores, or
the concrete board an alias names), at most one a second per subscriber, coalescing what
happened in between, carrying only what changed (``api.stream_diff``: the ``changed``
entries by rank, the ``removed`` player ids, the top's ``size``). Each carries the fields of
``GET /boards/{game}/{board}/top?n=10`` but its ``items`` (``snapshot_id``, ``game_id``,
``board``, ``total_players``...: ``total_players`` as of that snapshot, a new player far down
does not by itself make a message; ``published_at``, ``age_ms`` and ``stale`` as the top's
answer says them when the event is sent), and the snapshot id as the SSE ``id``. An alias stream
follows the alias as it moves: a move is a full event (the entries are another board's). A
board that does not exist is a ``404`` before the stream starts (``400`` for an unknown
board name, ``503`` while Redis has no usable boards snapshot); one that stops existing
while streamed (retention dropped its period) ends the stream with a ``gone`` event
``{"error": "no such board: ..."}``. A comment line every 15 s keeps idle connections
open; streams end at once when the server stops (``api.sse``). A client reconnecting with
``Last-Event-ID`` (known to this process: ``api.sse.History``) gets first the changes since
that event (none if the top is the same), else a full event.

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

from rankflow.api import sse, stream_diff
from rankflow.api.boards import ERRORS, UNAVAILABLE, WHY, board_path, game_path
from rankflow.api.responses import UsageErrorsAre400
from rankflow.api.schemas import text
from rankflow.api.shared_cache import SharedTops, judged_by
from rankflow.api.watch import Watched
from rankflow.connectors.board_read import NoBoardsSnapshot, NoSuchBoard

log = logging.getLogger("rankflow.api")

router = APIRouter(route_class=UsageErrorsAre400)  # its path never fails FastAPI's checks: no 422

TOP = 10


KEY = "player_id"
"""What names a board's entry in an event's ``removed`` (``api.stream_diff``)."""

Held = tuple[str, list[dict[str, Any]]]
"""What a client of a board's stream holds: the concrete board and its top entries."""


def shown(top: dict[str, Any]) -> Held:
    """What a subscriber sees change: the concrete board and its top entries."""
    return top["board"], top["items"]


def board_event(held: Held | None, top: dict[str, Any]) -> bytes | None:
    """The ``board`` event taking a client from ``held`` to ``top`` (None: it holds it already).
    A full event when it holds nothing or another board (an alias that moved: its entries are
    of the board it named before, not a state of this one to patch)."""
    previous = None if held is None or held[0] != top["board"] else held[1]
    body = stream_diff.event(previous, top, KEY)
    return None if body is None else stream_diff.message("board", top["snapshot_id"] or 0, body)


class BoardFeed:
    """One subscriber's :class:`api.sse.Feed`: ``first`` is the top 10 read at ``seen``,
    the watcher's version before the read; ``held``: what a resuming client holds (None: nothing).
    :attr:`first` is the stream's first event (None: the client holds ``first`` already)."""

    def __init__(self, watch: Watched, tops: SharedTops, game: str, board: str, first: dict[str, Any],
                 seen: Hashable | None, history: sse.History | None = None, held: Held | None = None) -> None:
        self.watch, self.tops, self.game, self.board = watch, tops, game, board
        self.first = board_event(held, judged_by(tops, first))
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
        self.history.record((self.game, self.board), top["snapshot_id"] or 0, shown(top))
        message = board_event(self.sent, judged_by(self.tops, top))
        if message is not None:
            self.sent = shown(top)
        return message


@router.get("/boards/{game:game}/{board}/stream", summary="Server-Sent Events: a board's top 10 when it changes",
            response_class=StreamingResponse,
            responses={200: text("text/event-stream", "`board` events: the top 10 at once (full), then what "
                                                      "changed (changed, removed, size, snapshot_id) when a snapshot "
                                                      "changes it; `gone` when it is dropped"),
                       **WHY})
async def stream_board(request: Request, game: str = game_path(), board: str = board_path()) -> Response:
    watch: Watched = request.app.state.board_changes
    seen = watch.version
    tops: SharedTops = request.app.state.board_tops
    first = await ERRORS.ask(request.app.state.boards, lambda _: tops.top(game, board, TOP))
    if isinstance(first, Response):
        return first
    history = sse.history(request.app.state, "boards")
    held = history.at((game, board), sse.last_event_id(request))  # what the client last got, if known
    feed = BoardFeed(watch, tops, game, board, first, seen, history, held)
    return sse.event_stream(request, watch, feed, feed.first)
