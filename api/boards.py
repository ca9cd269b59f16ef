"""Game score boards for readers: the list of boards, top N, one player, around a player.

Contract (docs/semantics/boards.md section 5; every answer is exactly what
``connectors.board_read`` gives, so it names its ``snapshot_id``, ``game_id`` and the
concrete ``board``, the aliases ``daily`` and ``weekly`` resolved):

* ``GET /boards`` -> ``{snapshot_id, games: {game: {boards: [...], aliases: {daily,
  weekly}}}}``: every board there is, ``all`` and ``best`` first, then the periods
  newest first; an alias names the concrete board it resolves to (or null).
* ``GET /boards/{game}/{board}/top?n=N`` -> ``{snapshot_id, game_id, board,
  total_players, items: [{rank, competition_rank, player_id, score}]}``; n defaults to 10.
* ``GET /boards/{game}/{board}/players/{player_id}`` -> ``{snapshot_id, game_id, board,
  player_id, score, rank, competition_rank}``.
* ``GET /boards/{game}/{board}/players/{player_id}/around?r=R`` -> ``{snapshot_id,
  game_id, board, items}``: the entries ranked R above to R below the player, fewer
  near the ends; r defaults to 5.

A usage error is ``400 {"error"}`` and never clamped: ``n`` outside 1..1000, ``r``
outside 0..50, a value that is not an integer, a board name that is none of ``all``,
``best``, ``daily``, ``weekly``, ``daily:YYYY-MM-DD``, ``weekly:YYYY-Www``. A board
that does not exist is ``404 {"error": "no such board: GAME/BOARD"}``; a player not
on the board ``404 {"error": "PLAYER is not on GAME/BOARD"}``. ``503`` while Redis
cannot be reached. Ids may hold ``/``, as is or as ``%2F``: a game id is the shortest
path that a board name and the route's rest follow (:class:`GameIdConvertor`), a
player id the rest of the path (``/around`` ends it).

Each query is one script call on the async Redis client (one round trip unless a
rebuild or an alias moved since the last query): the event loop never waits on Redis.
A top N is read once per board, n and snapshot and shared (``api.board_watch``): it
may be one poll interval (100 ms) behind the newest snapshot, never a mix of two.

With ``rankflow serve --board-index memory`` the same queries are answered from an
in-process copy of every board (``api.board_mirror``), the same JSON, each answer
at most one poll interval behind Redis: no request waits for Redis (or for the
publish script that holds it), at the price of the boards' memory in every process.
``app.state.boards`` is then a ``MirroredBoards``, which asks Redis until the copy is loaded.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import orjson
import redis
from fastapi import APIRouter, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.routing import APIRoute
from starlette.convertors import Convertor, register_url_convertor

from rankflow.api.board_mirror import MirroredBoards
from rankflow.api.board_watch import TopCache
from rankflow.connectors.board_read import MAX_N, MAX_R, AsyncBoardReader, BoardQueryError, BoardsMoving

log = logging.getLogger("rankflow.api")


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def usage_error(message: str) -> Response:
    return _json({"error": message}, 400)


def validation_message(exc: RequestValidationError) -> str:
    """FastAPI's parameter errors as one line: ``n: Input should be a valid integer, ...``."""
    return "; ".join(f"{e['loc'][-1]}: {e['msg']}" for e in exc.errors())


class UsageErrorsAre400(APIRoute):
    """A parameter FastAPI cannot read (``n=ten``) is a usage error like one out of
    range: ``400 {"error"}``, never FastAPI's own ``422``, so a client has one rule."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                return usage_error(validation_message(exc))

        return handle


router = APIRouter(route_class=UsageErrorsAre400)


class GameIdConvertor(Convertor[str]):
    """``{game:game}``: a game id that may hold ``/`` (docs/semantics/boards.md allows any characters).

    The shortest match that the rest of the route still fits: ``/boards/a/b/all/top`` is
    game ``a/b``, board ``all`` (``a`` would leave ``b/all/top``, which is no route), and
    a player id holding ``/players/`` stays whole. Only a game id holding ``/players/``
    is ambiguous (the player routes, tried first, take its first part for the game):
    such a game is read with the CLI.
    """

    regex = "[^/].*?"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("game", GameIdConvertor())


def drop_422(schema: dict[str, Any], routes: list[Any]) -> None:
    """Take FastAPI's ``422`` out of the OpenAPI of the routes that never send it.

    FastAPI lists it for every route with parameters; :class:`UsageErrorsAre400` routes
    answer ``400`` instead, and a client reading the schema should see what it gets.
    """
    for route in routes:
        if isinstance(route, UsageErrorsAre400):
            for method in route.methods:
                schema["paths"][route.path_format][method.lower()]["responses"].pop("422", None)

UNAVAILABLE = (redis.RedisError, OSError, BoardsMoving)
"""What makes a board query a ``503``: Redis cannot be reached, or a rebuild keeps switching."""

ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "a usage error: n or r out of range or not an integer, an unknown board name"},
    404: {"description": "no such board (its game or period has no result, or it was dropped), "
                         "or the player is not on it"},
    503: {"description": "Redis cannot be reached (or the boards' generation kept switching during the query)"},
}


Reader = AsyncBoardReader | MirroredBoards
"""Who answers the board queries: Redis, or the in-process mirror (``--board-index``)."""


async def ask(request: Request,
              query: Callable[[Reader], Awaitable[dict[str, Any]]]) -> dict[str, Any] | Response:
    """The reader's answer, or the error response its failure calls for."""
    reader: Reader = request.app.state.boards
    try:
        return await query(reader)
    except ValueError as exc:
        return usage_error(str(exc))
    except BoardQueryError as exc:
        return _json({"error": str(exc)}, 404)
    except UNAVAILABLE as exc:
        return unreachable(exc)


async def answer(request: Request, query: Callable[[Reader], Awaitable[dict[str, Any]]]) -> Response:
    got = await ask(request, query)
    return got if isinstance(got, Response) else _json(got)


def unreachable(exc: BaseException) -> Response:
    log.warning("board query failed: %r", exc)
    return _json({"error": f"cannot read the boards from Redis: {exc}"}, 503)


@router.get("/boards", summary="Every game's boards and aliases",
            responses={503: ERRORS[503]})
async def list_boards(request: Request) -> Response:
    reader: Reader = request.app.state.boards
    try:
        return _json(await reader.boards())
    except UNAVAILABLE as exc:
        return unreachable(exc)


@router.get("/boards/{game:game}/{board}/players/{player_id:path}/around",
            summary="The entries ranked r above to r below a player",
            responses={k: ERRORS[k] for k in (400, 404, 503)})
async def around(request: Request, game: str, board: str, player_id: str,
                 r: int = Query(5, description=f"how many entries on each side, 0..{MAX_R}")) -> Response:
    return await answer(request, lambda reader: reader.around(game, board, player_id, r))


@router.get("/boards/{game:game}/{board}/players/{player_id:path}", summary="One player's score and ranks on a board",
            responses={k: ERRORS[k] for k in (400, 404, 503)})
async def player(request: Request, game: str, board: str, player_id: str) -> Response:
    return await answer(request, lambda reader: reader.player(game, board, player_id))


@router.get("/boards/{game:game}/{board}/top", summary="A board's first n entries, with both ranks",
            responses={k: ERRORS[k] for k in (400, 404, 503)})
async def top(request: Request, game: str, board: str,
              n: int = Query(10, description=f"how many entries, 1..{MAX_N}")) -> Response:
    tops: TopCache = request.app.state.board_tops
    return await answer(request, lambda _: tops.top(game, board, n))
