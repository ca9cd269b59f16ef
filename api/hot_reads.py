"""The hot read routes without the framework: :class:`HotReads`, pure ASGI middleware.

Contract: a ``GET`` that one of the products' prepared routes (``api.prepared``: the
boards' ``/boards/{game}/{board}/top`` with ``n`` or no parameter and
``/boards/{game}/{board}/players/{player_id}``, ids without ``/``) takes, and whose route
has an ``answer``, is answered here with exactly the bytes and headers the FastAPI route
sends for a ``200``: the route's ``answer`` (a top from
:meth:`api.shared_cache.SharedTops.top_bytes`, encoded once per board, n and snapshot; a
player from the reader: the in-process mirror, or Redis until it is loaded). Every other
request, and every request whose answer is not a ``200`` (``answer`` gives None or raises:
a usage error, no such board or player, Redis unreachable), goes to FastAPI, which answers
it as it always did: the errors have one source, and ``/openapi.json`` still documents the
routes. The request keeps its route in the scope (``scope["route"]``), so ``/metrics``
counts it under its template; ``app.state.hot_answers`` counts the requests answered here.

Why: FastAPI's routing, parameter validation and dependency solving cost about half
a millisecond of CPU per request, many times the answer itself (a mirror's rank is
O(log n), a top is one cached ``bytes``): issue 21 goal 4 asks at most 50 us. What is
ready before the request never gets here: the server's protocol writes it.
"""

from __future__ import annotations

from typing import Any

from rankflow.api.prepared import PreparedAnswers

HEADERS = [(b"content-type", b"application/json")]
"""After ``content-length``, as Starlette's ``Response`` writes them."""


class HotReads:
    """Answers the prepared routes' reads of a ``200`` itself; all else goes to ``app``."""

    def __init__(self, app: Any, answers: PreparedAnswers, routes: dict[str, Any]) -> None:
        self.app = app
        self.answers = answers
        self.routes = routes  # route template (``path_format``) -> its APIRoute (for the metrics' label)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
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
        found = self.answers.match(scope["path"], scope["query_string"])
        if found is None or "app" not in scope:
            return None
        matcher, params, value = found
        answer = matcher.route.answer
        if answer is None:
            return None
        try:
            body = await answer(scope["app"].state, params, value)
        except Exception:  # noqa: BLE001 - FastAPI answers the failure (its status, message and log)
            return None
        if body is not None:
            route = self.routes.get(matcher.route.template)
            if route is not None:
                scope["route"] = route
        return body
