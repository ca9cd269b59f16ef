"""Game score boards for readers: the list of boards, top N, one player, around a player.

Contract (docs/semantics/boards.md section 5; every answer is exactly what
``connectors.board_read`` gives, so it names its ``snapshot_id``, ``game_id`` and the
concrete ``board``, the aliases ``daily`` and ``weekly`` resolved; a top, a player's rank and
an around also name when that snapshot was published, ``published_at`` (ms since the epoch,
read with the id), ``age_ms``, its age when answered, and ``stale``, whether that age is over
``rankflow serve --stale-after-ms``, the listeners' rule: ``connectors.snapshot_age``):

* ``GET /boards`` -> ``{snapshot_id, games: {game: {boards: [...], aliases: {daily,
  weekly}}}}``: every board there is, ``all`` and ``best`` first, then the periods
  newest first; an alias names the concrete board it resolves to (or null).
* ``GET /boards/{game}/{board}/top?n=N`` -> ``{snapshot_id, published_at, age_ms, stale, game_id, board,
  total_players, items: [{rank, competition_rank, player_id, score}]}``; n defaults to 10.
* ``GET /boards/{game}/{board}/players/{player_id}`` -> ``{snapshot_id, published_at, age_ms, stale, game_id, board,
  player_id, score, rank, competition_rank}``.
* Rank change (docs/semantics/boards.md 5.5): when the flow runs with ``--rank-change`` every entry of a top,
  a page and an around, and a player's answer, also carry ``rank_change``; the answers come from Redis's
  reader then (the mirror and its prepared answers step aside, ``BoardMirror.serves``). With
  ``since=day-start`` or ``since=SNAPSHOT`` (5.6) on those four routes the changes count from the
  game's day start or that snapshot, always read from Redis, and the answer names the basis
  (``since_snapshot_id``); a basis not retained (the retained ones move with every snapshot) is
  ``409 {"error"}`` naming those that are, as is any ``since`` on a final, which has no rank change.
* ``GET /boards/{game}/{board}/players/{player_id}/around?r=R`` -> ``{snapshot_id,
  published_at, age_ms, stale, game_id, board, items}``: the entries ranked R above to R below the player, fewer
  near the ends; r defaults to 5.
* ``POST /boards/{game}/{board}/ranks`` with ``{"players": [id, ...]}`` (at most 1,000) -> ``{snapshot_id,
  published_at, age_ms, stale, game_id, board, total_players, items: [{rank, competition_rank, rank_in_set,
  player_id, score}], absent: [id, ...]}``: the players on the board in board order, the others apart
  (``board_read.scoped_ranks``). A body that is not such an object, or an id that is not a string of 1 to 64
  characters, is ``400``; a body over 1 MiB ``413``.

Pages, percentiles and tie styles (docs/semantics/boards.md 5.1 to 5.3, ``connectors.board_pages``):

* ``top?n=N&after=CURSOR``: the n entries after the entry the cursor names, with ``next`` (the
  last one's cursor) unless they end the board; ``after=`` (empty) is the first page.
* ``top?n=N&percentile=P``: the first n entries of the top P percent; with ``after``, its pages.
* ``GET /boards/{game}/{board}/players/{player_id}/page?n=N`` -> ``{..., player_id, page, total_players,
  items, next}``: the page of n the player is on.
* ``GET /boards/{game}/{board}/score-for-percentile?p=P`` -> ``{..., total_players, percentile, score}``:
  the least score at percentile P or above (null when no entry is).
* ``ties=ordinal|competition|dense`` on each of them, the top, a player and an around: every
  ``rank`` in the answer is that style's; a player's ``percentile`` follows it. Without these
  parameters a top is the shared one (below) and the answers are as they were.

A usage error is ``400 {"error"}`` and never clamped: ``n`` outside 1..1000, ``r``
outside 0..50, a value that is not an integer, a board name that is none of ``all``,
``best``, ``daily``, ``weekly``, ``daily:YYYY-MM-DD``, ``weekly:YYYY-Www``. A board
that does not exist is ``404 {"error": "no board 'B' in game 'G'; its boards: ..."}`` (or ``"no game
'G'; games: ..."``: ``board_read.missing_board``); a player not
on the board ``404 {"error": "PLAYER is not on GAME/BOARD"}``. ``503`` while Redis
cannot be reached, and while it has no usable boards snapshot (its generation has no
snapshot id: nothing published yet, or Redis lost its data), as the listeners' routes
answer then: ``{"error": "no usable boards snapshot in namespace ..."}``, with
``--board-index memory`` also the last answer this process had, marked ``"stale": true``.
A board is "no such board" only in a usable snapshot. Ids may hold ``/``, as is or as ``%2F``: a game id is the shortest
path that a board name and the route's rest follow (``{game:game}``), a
player id the rest of the path (``/around`` ends it).

Each query is one script call on the async Redis client (one round trip unless a
rebuild or an alias moved since the last query): the event loop never waits on Redis.
A top N is read once per board, n and snapshot and shared (``api.shared_cache``): it
may be one poll interval (100 ms) behind the newest snapshot, never a mix of two, and its
``age_ms`` and ``stale`` are the request's (prepared bytes too: both are written into them when sent).

With ``rankflow serve --board-index memory`` the same queries are answered from an
in-process copy of every board (``api.board_mirror``), the same JSON, each answer
at most one poll interval behind Redis: no request waits for Redis (or for the
publish script that holds it), at the price of the boards' memory in every process.
``app.state.boards`` is then a ``MirroredBoards``, which asks Redis until the copy is loaded.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import redis
from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response

from rankflow.api import board_watch
from rankflow.api import schemas_boards
from rankflow.api.board_mirror import MirroredBoards
from rankflow.api.http_cache import Cacheable
from rankflow.api.paths import register_id
from rankflow.api.prepared import PreparedRoute
from rankflow.api.ingest import read_body
from rankflow.api.responses import Errors, Failure, UsageErrorsAre400, error_response, json_response
from rankflow.api.schemas import Error, bounded, model
from rankflow.api.shared_cache import SharedTops
from rankflow.connectors.board_layout import RedisBoardsLayout
from rankflow.connectors.board_pages import PERCENT, TIES
from rankflow.connectors.board_read import (MAX_N, MAX_PLAYERS, MAX_R, SINCE, AsyncBoardReader, BoardsMoving,
                                            NoBoardsSnapshot, NoSuchBoard, NotOnBoard, SinceNotRetained, check_board,
                                            check_n)
from rankflow.connectors.finals_read import aread_finals
from rankflow.connectors.redis_publish import dumps_document
from rankflow.connectors.snapshot_age import judged

router = APIRouter(route_class=UsageErrorsAre400)

TOP_N = 10
"""Entries of a top when the query names no ``n`` (its prepared route's too)."""


# ``{game:game}``: a game id that may hold ``/`` (docs/semantics/boards.md allows any characters).
#
# The shortest match that the rest of the route still fits: ``/boards/a/b/all/top`` is
# game ``a/b``, board ``all`` (``a`` would leave ``b/all/top``, which is no route), and
# a player id holding ``/players/`` stays whole. Only a game id holding ``/players/``
# is ambiguous (the player routes, tried first, take its first part for the game):
# such a game is read with the CLI.
register_id("game", "[^/].*?")


UNAVAILABLE = (redis.RedisError, OSError, BoardsMoving, RedisBoardsLayout)
"""What makes a board query a ``503``: Redis cannot be reached, a rebuild keeps switching, or
the boards there are in another rankflow's layout (the message says to rebuild)."""

ERRORS = Errors("board", "the boards", {Failure.USAGE: (ValueError,), Failure.NOT_PUBLISHED: (NoBoardsSnapshot,),
                                        Failure.MISSING: (NoSuchBoard, NotOnBoard),
                                        Failure.CONFLICT: (SinceNotRetained,), Failure.UNREACHABLE: UNAVAILABLE}, {
    400: "a usage error: n or r out of range or not an integer, an unknown board name",
    404: "no such board in the current snapshot (its game or period has no result, or it was dropped), or the "
         "player is not on it",
    409: "since names a basis of rank change not kept now (or none is: the flow runs without --rank-change, or the "
         "board is a final); the message names those that are",
    503: "no usable boards snapshot (nothing published yet, or Redis lost its data; with --board-index memory the "
         "last answer this process had comes marked stale), or Redis cannot be reached (or the boards' generation "
         "kept switching during the query, or the boards there were written in an older layout: rebuild them)",
})


Reader = AsyncBoardReader | MirroredBoards
"""Who answers the board queries: Redis, or the in-process mirror (``--board-index``)."""


async def answer(request: Request, query: Callable[[Reader], Awaitable[dict[str, Any]]]) -> Response:
    """The answer of ``query(reader)`` with its ``stale`` now (when it has an age), or the error
    response its failure calls for."""
    state = request.app.state
    got = await ERRORS.ask(state.boards, query)
    return got if isinstance(got, Response) else json_response(judged(got, state.settings.stale_after_ms))


def game_path() -> Any:
    return Path(description="the game id (may hold '/', as is or as %2F)", examples=["arena"], **bounded(minLength=1))


def board_path() -> Any:
    """The board name the routes accept (else ``400``): its pattern in the schema."""
    return Path(description="all, best, daily, weekly (aliases of the newest period), daily:YYYY-MM-DD, "
                            "weekly:YYYY-Www, season:NAME, or final: and one of those periods (its final standings)",
                examples=["all", "daily"], **bounded(pattern=schemas_boards.BOARD))


def player_path() -> Any:
    return Path(description="the player id (the rest of the path)", examples=["p000042"], **bounded(minLength=1))


def ties_query() -> Any:
    """``ties``: the tie style of every ``rank`` in the answer (docs/semantics/boards.md 5.3)."""
    return Query(None, description="the style of every rank in the answer: ordinal (1234, as without it), "
                                   "competition (1224) or dense (1223); percentile follows it",
                 **bounded(pattern=f"^({'|'.join(TIES)})$"))


def since_query() -> Any:
    """``since``: rank change since the day start or a retained snapshot (docs/semantics/boards.md 5.6)."""
    return Query(None, description="with a run of rankflow run --flow boards --rank-change: every rank_change "
                                   "since day-start (the board before the game's current day began) or since "
                                   "this snapshot id, one still retained (the day start's, or the one before "
                                   "the board's last change); not on a final",
                 examples=["day-start"], **bounded(pattern=f"^({SINCE.pattern})$"))


def from_redis(request: Request, since: str | None, query: Callable[[Any], Awaitable[dict[str, Any]]]
               ) -> Callable[[Reader], Awaitable[dict[str, Any]]]:
    """``query`` for the reader at hand, or for Redis's when it asks ``since``: the in-process copy
    keeps no moves (``BoardMirror.serves``)."""
    boards = request.app.state.boards
    if since is None or not isinstance(boards, MirroredBoards):
        return query
    return lambda _: query(boards.reader)


def percent_query(description: str) -> Any:
    return Query(None, description=description, examples=["10", "99.5"], **bounded(pattern=f"^{PERCENT.pattern}$"))


WHY = ERRORS.openapi(400, 404, 503)
SINCE_WHY = ERRORS.openapi(400, 404, 409, 503)


@router.get("/boards", summary="Every game's boards and aliases",
            responses={200: model(schemas_boards.BoardList, "every board there is, per game"), 503: WHY[503]})
async def list_boards(request: Request) -> Response:
    return await answer(request, lambda reader: reader.boards())


@router.get("/boards/{game:game}/finals", summary="A game's final standings: the periods retention dropped",
            responses={200: model(schemas_boards.FinalList, "the game's finals, newest closed first (none: empty)"),
                       503: WHY[503]})
async def finals(request: Request, game: str = game_path()) -> Response:
    """Read from Redis whatever ``--board-index`` says: the in-process copy holds the live boards."""
    state = request.app.state
    reader = state.boards.reader if isinstance(state.boards, MirroredBoards) else state.boards
    return await answer(request, lambda _: aread_finals(reader.client, state.settings.namespace, game))


@router.get("/boards/{game:game}/{board}/players/{player_id:rest}/page",
            summary="The page of n entries a player is on, with the next page's cursor",
            responses={200: model(schemas_boards.PlayerPage, "the player's page: ranks n*(page-1)+1 to n*page"),
                       **SINCE_WHY})
async def player_page(request: Request, game: str = game_path(), board: str = board_path(),
                      player_id: str = player_path(),
                      n: int = Query(TOP_N, description=f"entries per page, 1..{MAX_N}",
                                     **bounded(minimum=1, maximum=MAX_N)),
                      ties: str | None = ties_query(), since: str | None = since_query()) -> Response:
    asked = {"since": since} if since is not None else {}
    return await answer(request, from_redis(request, since,
                                            lambda reader: reader.page(game, board, player_id, n, ties=ties, **asked)))


@router.get("/boards/{game:game}/{board}/players/{player_id:rest}/around",
            summary="The entries ranked r above to r below a player",
            responses={200: model(schemas_boards.Around, "the entries around the player, fewer near the ends"),
                       **SINCE_WHY})
async def around(request: Request, game: str = game_path(), board: str = board_path(),
                 player_id: str = player_path(),
                 r: int = Query(5, description=f"how many entries on each side, 0..{MAX_R}",
                                **bounded(minimum=0, maximum=MAX_R)),
                 ties: str | None = ties_query(), since: str | None = since_query()) -> Response:
    asked = {"since": since} if since is not None else {}
    return await answer(request, from_redis(request, since,
                                            lambda reader: reader.around(game, board, player_id, r, ties=ties,
                                                                         **asked)))


@router.get("/boards/{game:game}/{board}/players/{player_id:rest}", summary="One player's score and ranks on a board",
            responses={200: model(schemas_boards.PlayerRank, "the player's score and both ranks"), **SINCE_WHY})
async def player(request: Request, game: str = game_path(), board: str = board_path(),
                 player_id: str = player_path(), ties: str | None = ties_query(),
                 since: str | None = since_query()) -> Response:
    asked = {"since": since} if since is not None else {}
    return await answer(request, from_redis(request, since,
                                            lambda reader: reader.player(game, board, player_id, ties=ties, **asked)))


@router.get("/boards/{game:game}/{board}/top", summary="A board's first n entries, with both ranks",
            responses={200: model(schemas_boards.Top, "the first n entries"), **SINCE_WHY})
async def top(request: Request, game: str = game_path(), board: str = board_path(),
              n: int = Query(TOP_N, description=f"how many entries, 1..{MAX_N}",
                             **bounded(minimum=1, maximum=MAX_N)),
              after: str | None = Query(None, description="a page's next cursor: the n entries after the entry it "
                                                          "names; empty for the first page (then the answer carries "
                                                          "next too); with percentile, the pages of that share",
                                        **bounded(pattern="^[A-Za-z0-9_-]*$")),
              ties: str | None = ties_query(),
              percentile: str | None = percent_query("the top P percent of the board (at most n entries), "
                                                     "0..100 with at most two decimals"),
              since: str | None = since_query()) -> Response:
    if since is not None:  # rank change since a basis (5.6): Redis's reader
        return await answer(request, from_redis(request, since, lambda reader: reader.top(
            game, board, n, after=after, ties=ties, percentile=percentile, since=since)))
    if after is not None or ties is not None or percentile is not None:  # a page, a style, a share: read as asked
        return await answer(request, lambda reader: reader.top(game, board, n, after=after, ties=ties,
                                                               percentile=percentile))
    tops: SharedTops = request.app.state.board_tops
    return await answer(request, lambda _: tops.top(game, board, n))


@router.get("/boards/{game:game}/{board}/score-for-percentile", summary="The least score at a percentile or above",
            responses={200: model(schemas_boards.ScoreForPercentile, "the score at percentile p"), **WHY})
async def score_for_percentile(request: Request, game: str = game_path(), board: str = board_path(),
                               p: str = Query(description="the percentile, 0..100 with at most two decimals",
                                              examples=["90"], **bounded(pattern=f"^{PERCENT.pattern}$")),
                               ties: str | None = ties_query()) -> Response:
    return await answer(request, lambda reader: reader.score_for_percentile(game, board, p, ties=ties))

MAX_RANKS_BODY = 1 << 20
"""Bytes of a ranks body at most (``413`` past it): 1,000 ids of 64 characters, each escaped as
``\\uXXXX``, fit in 400 KiB."""

RANKS_WHY = {**WHY, 400: model(Error, "a usage error: the body is not JSON, not an object with a list 'players', "
                                      f"holds more than {MAX_PLAYERS} ids or one that is not a string of 1 to 64 "
                                      "characters; an unknown board name"),
             404: model(Error, "no such board in the current snapshot (its game or period has no result, or it was "
                               "dropped)"),
             413: model(Error, f"the body is longer than {MAX_RANKS_BODY} bytes")}


def players_of(body: bytes) -> Any:
    """The ``players`` of a ranks body (checked by the reader, ``board_read.check_players``); a usage
    error (ValueError) when the body is not a JSON object naming them."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise ValueError('the body must be JSON: {"players": ["id", ...]}') from None
    if not isinstance(document, dict) or "players" not in document:
        raise ValueError('the body must be a JSON object with a list of player ids: {"players": ["id", ...]}')
    return document["players"]


@router.post("/boards/{game:game}/{board}/ranks", summary="The ranks of a set of players (friends, a clan) on a board",
             responses={200: model(schemas_boards.Ranks, "the players on the board in board order, with their rank "
                                                         "on it and among themselves; the others apart"),
                        **RANKS_WHY},
             openapi_extra=schemas_boards.ranks_body(MAX_PLAYERS))
async def ranks(request: Request, game: str = game_path(), board: str = board_path(),
                ties: str | None = ties_query()) -> Response:
    body = await read_body(request, MAX_RANKS_BODY)
    if body is None:
        return error_response(413, f"the body is longer than {MAX_RANKS_BODY} bytes")
    try:
        players = players_of(body)
    except ValueError as exc:
        return error_response(400, str(exc))
    return await answer(request, lambda reader: reader.ranks(game, board, players, ties=ties))


# -- answers ready before the request (api.prepared): the server's protocol writes them ------

def _top_query(params: tuple[str, ...], n: int | None) -> tuple[str, str, int]:
    """``(game, board, n)`` of a prepared top, checked as :func:`top` checks them."""
    game, board = params
    assert n is not None
    check_n(n)
    check_board(board)
    return game, board, n


def ready_top(state: Any, params: tuple[str, ...], n: int | None) -> bytes | None:
    """A top already encoded for the current snapshot (``SharedTops.ready``): as :func:`top` answers it."""
    tops: SharedTops = state.board_tops
    return tops.ready(*_top_query(params, n))


def ready_player(state: Any, params: tuple[str, ...], _: int | None) -> bytes | None:
    """A player's rank from the in-process mirror once it serves (``--board-index memory``): as
    :func:`player` answers it; a player not on the board raises, and :func:`player` says so."""
    reader: Reader = state.boards
    game, board, player = params
    if not isinstance(reader, MirroredBoards) or not reader.serves_board(board):
        return None
    return reader.mirror.player_bytes(game, board, player, state.settings.stale_after_ms)


def validated_player(state: Any, params: tuple[str, ...], _: int | None, target: bytes,
                     control: bytes) -> tuple[bytes, bytes] | None:
    """:func:`ready_player` and its validators in one call (``api.prepared.Validated``): a rank is a
    new target almost every request."""
    reader: Reader = state.boards
    game, board, player = params
    if not isinstance(reader, MirroredBoards) or not reader.serves_board(board):
        return None
    return reader.mirror.player_reply(game, board, player, state.settings.stale_after_ms, target, control)


async def answer_top(state: Any, params: tuple[str, ...], n: int | None) -> bytes:
    """:func:`ready_top` read now (``SharedTops.top_bytes``: once per board, n and snapshot)."""
    tops: SharedTops = state.board_tops
    return await tops.top_bytes(*_top_query(params, n))


async def answer_player(state: Any, params: tuple[str, ...], _: int | None) -> bytes:
    """:func:`ready_player` read now, from the reader (the mirror, or Redis until it serves)."""
    check_board(params[1])
    reader: Reader = state.boards
    return dumps_document(judged(await reader.player(*params), state.settings.stale_after_ms))


PREPARED = (PreparedRoute("/boards/{game}/{board}/top", "n", TOP_N, ready_top, answer_top),
            PreparedRoute("/boards/{game}/{board}/players/{player_id}", None, None, ready_player, answer_player,
                          validated_player))
"""The top and a player's rank, for ids without ``/``: written by the server's protocol when
ready, else answered by ``api.hot_reads`` before FastAPI's route."""

CACHEABLE = (Cacheable("/boards", board_watch.held),)
"""Every board read names the snapshot it comes from: validators, and ``304`` for the one held
(the mirror's, or the watcher's) without Redis."""
