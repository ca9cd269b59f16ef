"""The hot read routes without the framework: :class:`HotReads`, pure ASGI middleware.

Contract: ``GET /boards/{game}/{board}/top`` (``n`` as the only parameter, or none) and
``GET /boards/{game}/{board}/players/{player_id}``, with ids that hold no ``/``, are
answered here with exactly the bytes and headers the FastAPI routes (``api.boards``)
send for a ``200``; the top from :meth:`api.shared_cache.SharedTops.top_bytes`
(encoded once per board, n and snapshot), the player from the reader (the in-process
mirror, or Redis until it is loaded). Every other request, and every request whose
answer is not a ``200`` (a usage error, no such board or player, Redis unreachable),
goes to FastAPI, which answers it as it always did: the errors have one source, and
``/openapi.json`` still documents the routes. The request keeps its route in the
scope (``scope["route"]``), so ``/metrics`` counts it under its template;
``app.state.hot_answers`` counts the requests answered here.

Why: FastAPI's routing, parameter validation and dependency solving cost about half
a millisecond of CPU per request, many times the answer itself (a mirror's rank is
O(log n), a top is one cached ``bytes``): issue 21 goal 4 asks at most 50 us.
"""

from __future__ import annotations

import re
from typing import Any

from rankflow.api.boards import TOP_N
from rankflow.connectors.board_read import check_board, check_n
from rankflow.connectors.redis_publish import dumps_document

HEADERS = [(b"content-type", b"application/json")]
"""After ``content-length``, as Starlette's ``Response`` writes them."""

_N = re.compile(rb"(?:n=(\d{1,4}))?")
"""The only query strings answered here: none, or ``n`` as digits (anything else: FastAPI)."""


class HotReads:
    """Answers the boards' top and player reads of a ``200`` itself; all else goes to ``app``."""

    def __init__(self, app: Any, routes: dict[str, Any]) -> None:
        self.app = app
        self.routes = routes  # route template (``path_format``) -> its APIRoute (for the metrics' label)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and scope["path"].startswith("/boards/"):
            body = await self._answer(scope)
            if body is not None:
                scope["app"].state.hot_answers += 1  # what the tests see of this path
                await send({"type": "http.response.start", "status": 200,
                            "headers": [(b"content-length", b"%d" % len(body)), *HEADERS]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)

    async def _answer(self, scope: dict[str, Any]) -> bytes | None:
        """The ``200`` body of a hot read; None for FastAPI to answer (any other route or outcome)."""
        parts = scope["path"].split("/")
        if "" in parts[1:]:
            return None
        state = scope["app"].state if "app" in scope else None
        try:
            if len(parts) == 5 and parts[4] == "top":
                got = _N.fullmatch(scope["query_string"])
                if got is None or state is None:
                    return None
                n = int(got.group(1)) if got.group(1) else TOP_N
                check_n(n)
                check_board(parts[3])
                body: bytes = await state.board_tops.top_bytes(parts[2], parts[3], n)
                self._route(scope, "/boards/{game}/{board}/top")
                return body
            if len(parts) == 6 and parts[4] == "players" and not scope["query_string"] and state is not None:
                check_board(parts[3])
                answer = await state.boards.player(parts[2], parts[3], parts[5])
                self._route(scope, "/boards/{game}/{board}/players/{player_id}")
                return dumps_document(answer)
        except Exception:  # noqa: BLE001 - FastAPI answers the failure (its status, message and log)
            return None
        return None

    def _route(self, scope: dict[str, Any], template: str) -> None:
        route = self.routes.get(template)
        if route is not None:
            scope["route"] = route
