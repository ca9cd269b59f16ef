"""Answers that are ready before the request comes: :class:`PreparedAnswers`, asked by the server's protocol.

Contract: a product's route module may list ``PREPARED``, its :class:`PreparedRoute`\\ s:
a path template (the FastAPI route's ``path_format``, each ``{name}`` one path segment
without ``/``), the one integer query parameter it takes (or none) with its default,
and ``ready(state, params, value) -> bytes | None``: the route's ``200`` body if it can
be had now without waiting (an answer already encoded for the current snapshot, an
in-process lookup), else None. It must not await, block or change anything, and never
answer a request that FastAPI would answer otherwise than with that ``200``: a raise
or None leaves the request to the ASGI app, which answers it as it always did (its
errors have one source).

:meth:`PreparedAnswers.answer` matches a request's path and query against the routes
(:meth:`PreparedAnswers.match`: a query of nothing or ``name=digits``); the server's HTTP
protocol (``api.server.bounded_protocol``) asks it for a plain keep-alive ``GET`` (whose
path needs no decoding) before
it builds an ASGI request at all, and writes the body with exactly the headers uvicorn
and Starlette write for it, and the cache validators (``api.http_cache``: made once per
snapshot and target) that ``api.http_cache.CacheHeaders`` adds on the ASGI path; or a
``304`` when the request's ``If-None-Match`` holds the answer's tag (:meth:`PreparedAnswers.reply`).
Each answer is counted in ``/metrics`` under its route and status, as ``api.app.MeasureRequests``
counts the others, and apart as ``rankflow_api_prepared_answers_total{route}`` (what the
protocol answered itself: the rest of the route's requests took the ASGI path), and in
:attr:`PreparedAnswers.answered`. The counts are plain integers per route, added to the
Prometheus counters when ``/metrics`` is read (:meth:`PreparedAnswers.flush`): a counter's
``inc`` takes a lock, and this path is counted in microseconds.
A route's ``answer`` (when it has one) is the same body read when it is not ready: the
ASGI app's lean path (``api.hot_reads``) matches the same routes and awaits it.

Why: an ASGI request costs uvicorn a task, a request cycle and its events before the
app runs, and the app's middleware after it: measured at 1,000 req/s on one
connection's worth of work, 96-114 us of server CPU per request for a constant body
through uvicorn's ASGI path against 46-47 us written by the protocol itself
(docs/benchmarks.md, "Prepared answers"). A snapshot changes a few times a second; a
top is the same bytes for every request in between (issue 21, goal 4).
"""

from __future__ import annotations

import re
import time
from operator import itemgetter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rankflow.api.http_cache import HttpCache, matches, opaque_of, target_of

Ready = Callable[[Any, tuple[str, ...], int | None], "bytes | None"]
"""``ready(app state, the path's {name} segments in order, the query's value or default)``."""

Answer = Callable[[Any, tuple[str, ...], int | None], Awaitable["bytes | None"]]
"""``answer(...)``: as :data:`Ready`, but it may await a read (``api.hot_reads``)."""

Validated = Callable[[Any, tuple[str, ...], int | None, bytes, bytes], "tuple[bytes, bytes] | None"]
"""``validated(app state, segments, value, target, cache-control)``: as :data:`Ready`, with the
answer's validator lines (``api.http_cache.tag_parts``, the same as ``HttpCache.of_body`` makes of
the body): ``(body, lines)``, or None."""

_DIGITS = re.compile(rb"\d{1,4}")
STATUS_200 = b"HTTP/1.1 200 OK\r\n"
STATUS_304 = b"HTTP/1.1 304 Not Modified\r\n"


@dataclass(frozen=True)
class PreparedRoute:
    """One route a protocol may answer itself: ``template`` as FastAPI's ``path_format``."""

    template: str
    query: str | None
    default: int | None
    ready: Ready
    answer: Answer | None = None
    """The same ``200`` body when it is not ready, read now; the ASGI app's lean path
    (``api.hot_reads``) awaits it before FastAPI's route would run. None: FastAPI's route."""
    validated: Validated | None = None
    """The body and its validators in one call, for a route whose answers are a new target almost
    every request (a player's rank): keeping validators per target would not pay. None: ``ready``,
    then the validators kept per target."""

    def segments(self) -> tuple[str | None, ...]:
        """The template's segments after the first ``/``: a literal, or None for a ``{name}``.

        >>> PreparedRoute("/boards/{game}/{board}/top", "n", 10, lambda *_: None).segments()
        ('boards', None, None, 'top')
        """
        return tuple(None if s.startswith("{") else s for s in self.template.split("/")[1:])


def _no_segment(parts: list[str]) -> tuple[str, ...]:
    return ()


def _one_segment(at: int) -> Callable[[list[str]], tuple[str, ...]]:
    return lambda parts: (parts[at],)


class _Matcher:
    """One route, ready to match: its literal segments by position and its metric children."""

    __slots__ = ("route", "label", "literals", "literal_values", "holes", "prefix", "count", "not_modified", "latency",
                 "pending", "total")

    def __init__(self, route: PreparedRoute, label: str, count: Any, latency: Any, not_modified: Any = None) -> None:
        self.route, self.label = route, label
        segments = route.segments()
        # C getters of a split path's parts, each giving a tuple (a getter of one item gives the
        # item): the literals' led by the first part ("" before the first "/")
        self.literals = itemgetter(0, *(i + 1 for i, s in enumerate(segments) if s is not None))
        self.literal_values = ("", *(s for s in segments if s is not None))
        holes = [i + 1 for i, s in enumerate(segments) if s is None]
        self.holes: Callable[[list[str]], tuple[str, ...]] = (
            itemgetter(*holes) if len(holes) > 1 else _one_segment(holes[0]) if holes else _no_segment)
        self.prefix = None if route.query is None else route.query.encode() + b"="  # the query's ``name=``
        self.count, self.latency, self.not_modified = count, latency, not_modified
        self.pending = [0, 0]  # 200s and 304s not yet added to ``count`` and ``not_modified``
        self.total = 0  # answered by the protocol, ever


class PreparedAnswers:
    """The prepared routes of the products mounted, matched by segment count; O(routes of that count)."""

    def __init__(self, state: Any, routes: Iterable[PreparedRoute], labels: Mapping[str, str], metrics: Any,
                 cache: HttpCache | None = None) -> None:
        """``labels``: each template's route name in ``/metrics`` (FastAPI's ``path``);
        ``metrics``: the app's ``requests`` counter and ``latency`` histogram; ``cache``: the
        validators of the answers (``api.http_cache``), None for none."""
        self.state = state
        self.cache = cache
        self.answered = 0
        self._by_length: dict[int, list[_Matcher]] = {}
        for route in routes:
            label = labels.get(route.template, route.template)
            matcher = _Matcher(route, label, metrics.requests.labels(label, "200"), metrics.latency.labels(label),
                               metrics.requests.labels(label, "304"))
            self._by_length.setdefault(len(route.segments()), []).append(matcher)

    def answer(self, path: str, query: bytes) -> bytes | None:
        """The ``200`` body for ``GET path?query`` if a route has it ready; None: the app answers."""
        started = time.perf_counter()
        found = self._ready(path, query)
        if found is None:
            return None
        matcher, body = found
        self._count(matcher, 0, started)
        return body

    def reply(self, path: str, query: bytes, if_none_match: bytes | None,
              target: bytes | None = None) -> tuple[bytes, bytes, bytes] | None:
        """What the protocol writes for ``GET path?query`` if a route has the answer ready: the
        status line, then (after the server's default headers) the rest of the head and the body:
        a ``200`` with its ``content-length``, ``content-type``, validators (``api.http_cache``)
        and body, or a ``304`` with the validators only (an empty body), when ``if_none_match``
        (the request's ``If-None-Match``) holds the answer's tag. ``target``: the request's path
        and query as sent (``api.http_cache.target_of``, made from them if not given). None: the
        app answers. The body comes apart from the head: a top of 100 is some 8 KB, and each
        copy of it costs (the protocol writes the two without joining them)."""
        started = time.perf_counter()
        found = self.match(path, query)
        if found is None:
            return None
        cache = self.cache
        if cache is not None and found[0].route.validated is not None:
            return self._validated(found, target or target_of(path.encode(), query), if_none_match, cache, started)
        matcher = found[0]
        body = self._body(found)
        if body is None:
            return None
        if cache is None:
            validators = None
        else:
            validators = cache.of_body(target or target_of(path.encode(), query), body, path, self.state)
        if validators is None:
            self._count(matcher, 0, started)
            return STATUS_200, b"content-length: %d\r\ncontent-type: application/json\r\n\r\n" % len(body), body
        if if_none_match is not None and validators.matched_by(if_none_match):
            self._count(matcher, 1, started)
            return STATUS_304, validators.lines + b"\r\n", b""
        self._count(matcher, 0, started)
        return STATUS_200, b"content-length: %d\r\ncontent-type: application/json\r\n%s\r\n" % (
            len(body), validators.lines), body

    def _validated(self, found: tuple[_Matcher, tuple[str, ...], int | None], target: bytes,
                   if_none_match: bytes | None, cache: HttpCache, started: float) -> tuple[bytes, bytes, bytes] | None:
        """:meth:`reply` for a route with ``validated``: its body and validators in one call."""
        matcher, params, value = found
        try:
            made = matcher.route.validated(self.state, params, value, target, cache.control)  # type: ignore[misc]
        except Exception:  # noqa: BLE001 - the app answers the failure (its status, message and log)
            return None
        if made is None:
            return None
        body, lines = made
        if if_none_match is not None and matches(if_none_match, opaque_of(lines)):
            self._count(matcher, 1, started)
            return STATUS_304, lines + b"\r\n", b""
        self._count(matcher, 0, started)
        return STATUS_200, b"content-length: %d\r\ncontent-type: application/json\r\n%s\r\n" % (len(body), lines), body

    def _ready(self, path: str, query: bytes) -> tuple[_Matcher, bytes] | None:
        found = self.match(path, query)
        if found is None:
            return None
        body = self._body(found)
        return None if body is None else (found[0], body)

    def _body(self, found: tuple[_Matcher, tuple[str, ...], int | None]) -> bytes | None:
        """The route's ``ready`` body for a match; None (a failure too): the app answers."""
        matcher, params, value = found
        try:
            return matcher.route.ready(self.state, params, value)
        except Exception:  # noqa: BLE001 - the app answers the failure (its status, message and log)
            return None

    def _count(self, matcher: _Matcher, status: int, started: float) -> None:
        """One answer of ``matcher``'s route: ``status`` 0 a ``200``, 1 a ``304``."""
        self.answered += 1
        matcher.pending[status] += 1
        matcher.total += 1
        matcher.latency.observe(time.perf_counter() - started)

    def flush(self) -> None:
        """Add the answers counted since the last flush to the Prometheus counters (``/metrics``
        calls it before it reads them)."""
        for matchers in self._by_length.values():
            for matcher in matchers:
                done, not_modified = matcher.pending
                if done:
                    matcher.count.inc(done)
                if not_modified:
                    matcher.not_modified.inc(not_modified)
                matcher.pending = [0, 0]

    def metrics(self) -> bytes:
        """``rankflow_api_prepared_answers_total{route}``: each route's answers written by the
        protocol (``200`` and ``304``), in the Prometheus text format."""
        name = "rankflow_api_prepared_answers_total"
        lines = [f"# HELP {name} Requests answered by the server's protocol from a prepared answer (the rest "
                 f"of the route's requests took the ASGI path)\n# TYPE {name} counter\n"]
        for matchers in self._by_length.values():
            lines += [f'{name}{{route="{matcher.label}"}} {matcher.total}\n' for matcher in matchers]
        return "".join(lines).encode()

    def match(self, path: str, query: bytes) -> tuple[_Matcher, tuple[str, ...], int | None] | None:
        """The route ``GET path?query`` names, its ``{name}`` segments and its query's value (or
        default); None when no route takes exactly this path and query. O(routes of its length)."""
        parts = path.split("/")
        if parts[0]:
            return None
        for matcher in self._by_length.get(len(parts) - 1, ()):
            if matcher.literals(parts) == matcher.literal_values:
                params = matcher.holes(parts)
                if "" in params:
                    return None
                value = matcher.route.default
                if query:
                    prefix = matcher.prefix
                    if prefix is None or not query.startswith(prefix) or not _DIGITS.fullmatch(query, len(prefix)):
                        return None
                    value = int(query[len(prefix):])
                return matcher, params, value
        return None
