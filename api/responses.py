"""The read routes' answers: one JSON helper, one table of errors and their statuses.

Contract:

* :func:`json_response` writes a body as JSON (orjson; the standard library for an
  integer beyond 64 bits, such as an activity watermark: ``dumps_document``), and
  :func:`error_response` an error as ``{"error": message}``.
* :data:`STATUS` is the one error table: what kind of failure (:class:`Failure`) is
  which status on every read route, the listeners', the boards' and the activity
  rankings' alike. A product's :class:`Errors` says which of its reader's exceptions are
  which kind; :meth:`Errors.ask` turns a failed query into its response and
  :meth:`Errors.openapi` lists the answers a route gives. A "not published" failure that
  carries the last answer this process had (``last``) is answered ``503`` with it,
  marked ``"stale": true``, as the listeners' routes answer.
* A path no route matches, or a method its route does not take, is ``404``/``405
  {"error"}`` too (:func:`http_error`), never Starlette's ``{"detail"}``: one error shape.
* A parameter FastAPI cannot read (``k=ten``) is a usage error like one out of range,
  ``400`` (:class:`UsageErrorsAre400`), never FastAPI's own ``422``: a route whose class
  is not :class:`UsageErrorsAre400` (``POST /events``) keeps FastAPI's default, and
  :func:`drop_422` takes the ``422`` out of the schema of the routes that never send it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine
from enum import Enum
from typing import Any, TypeVar

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from rankflow.api.schemas import Error, Responses, Unavailable, model
from rankflow.connectors.redis_publish import dumps_document
from rankflow.connectors.snapshot_age import judged

log = logging.getLogger("rankflow.api")

Reader = TypeVar("Reader")


def json_response(body: Any, status: int = 200) -> Response:
    return Response(dumps_document(body), status_code=status, media_type="application/json")


def error_response(status: int, message: str) -> Response:
    return json_response({"error": message}, status)


class Failure(Enum):
    USAGE = "usage"  # a parameter out of range or not readable, an unknown name
    MISSING = "missing"  # what was asked for is not in the snapshot
    NOT_PUBLISHED = "not published"  # no snapshot to answer from (yet, or any more)
    UNREACHABLE = "unreachable"  # Redis cannot be reached, or a rebuild kept switching during the query
    CONFLICT = "conflict"  # what the query counts from is not kept now (a board's rank change since a snapshot)


STATUS: dict[Failure, int] = {Failure.USAGE: 400, Failure.MISSING: 404, Failure.NOT_PUBLISHED: 503,
                              Failure.UNREACHABLE: 503, Failure.CONFLICT: 409}
"""Every read route's status per kind of failure. No route differs today: the usage
errors FastAPI finds itself are ``400`` too (:class:`UsageErrorsAre400`)."""


class Errors:
    """One product's failures: which exceptions of its reader are which :class:`Failure`,
    and what its routes' OpenAPI says of each status."""

    def __init__(self, name: str, what: str, kinds: dict[Failure, tuple[type[BaseException], ...]],
                 descriptions: dict[int, str]) -> None:
        self.name = name  # "board": as in the log's "board query failed"
        self.what = what  # "the boards": as in the answer's "cannot read the boards from Redis"
        self.kinds = kinds
        self.descriptions = descriptions
        self.unavailable = kinds.get(Failure.UNREACHABLE, ())

    def openapi(self, *statuses: int) -> Responses:
        """The ``responses`` of a route that may answer ``statuses``: ``{"error"}`` bodies, a ``503``'s
        with the last answer this process had, if any (``api.schemas``)."""
        return {status: model(Unavailable if status == STATUS[Failure.NOT_PUBLISHED] else Error,
                              self.descriptions[status]) for status in statuses}

    def response(self, exc: BaseException) -> Response | None:
        """The answer to a query that raised ``exc``; None if ``exc`` is none of these failures."""
        for kind, types in self.kinds.items():
            if isinstance(exc, types):
                if kind is Failure.UNREACHABLE:
                    return self.unreachable(exc)
                last = getattr(exc, "last", None)
                if kind is Failure.NOT_PUBLISHED and last is not None:
                    # as the listeners' 503: the last answer this process had, marked stale (where its
                    # 200 says it, right after its age: ``judged`` places the key, ``True`` is its value)
                    return json_response({"error": str(exc), **judged(last, 0), "stale": True}, STATUS[kind])
                return error_response(STATUS[kind], str(exc))
        return None

    def unreachable(self, exc: BaseException) -> Response:
        log.warning("%s query failed: %r", self.name, exc)
        return error_response(STATUS[Failure.UNREACHABLE], f"cannot read {self.what} from Redis: {exc}")

    async def ask(self, reader: Reader, query: Callable[[Reader], Awaitable[dict[str, Any]]]) -> dict[str, Any] | Response:
        """The reader's answer, or the error response its failure calls for."""
        try:
            return await query(reader)
        except Exception as exc:
            answer = self.response(exc)
            if answer is None:
                raise
            return answer

    async def answer(self, reader: Reader, query: Callable[[Reader], Awaitable[dict[str, Any]]]) -> Response:
        got = await self.ask(reader, query)
        return got if isinstance(got, Response) else json_response(got)


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no route: ``404``; a method the route does not take: ``405``,
    with its ``Allow``) as every other error: ``{"error": ...}``."""
    assert isinstance(exc, HTTPException)
    answer = error_response(exc.status_code, str(exc.detail))
    answer.headers.update(exc.headers or {})
    return answer


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
                return error_response(STATUS[Failure.USAGE], validation_message(exc))

        return handle


def drop_422(schema: dict[str, Any], routes: list[Any]) -> None:
    """Take FastAPI's ``422`` out of the OpenAPI of the routes that never send it.

    FastAPI lists it for every route with parameters; :class:`UsageErrorsAre400` routes
    answer ``400`` instead, and a client reading the schema should see what it gets.
    """
    for route in routes:
        if isinstance(route, UsageErrorsAre400):
            for method in route.methods or ():
                schema["paths"][route.path_format][method.lower()]["responses"].pop("422", None)
