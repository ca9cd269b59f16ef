"""Cache validators of the snapshot-backed reads: ``ETag``, ``Cache-Control``, ``Last-Modified``, ``304``.

Contract (docs/http.md, "Caches and reverse proxies"):

* Every ``200`` of a ``GET`` on a product's snapshot-backed routes (a :class:`Cacheable`
  prefix: ``/rankings``, ``/songs/``, ``/boards``, ``/activity``; not the event streams)
  carries, after ``content-type``::

      etag: W/"<snapshot_id>-<published_at>-<digest of the path and query>"
      cache-control: public, max-age=N        (N: --cache-max-age; 0: no-cache)
      last-modified: <published_at as an HTTP date>

  The tag is weak: two answers of one snapshot differ in ``age_ms``, not in what they say.
  It names the snapshot by its id and its publish time (ids start over after Redis lost its
  data; the publish time does not come back), the request target (``k``, the board, the
  player...: a digest of the path and query as sent), and ends with ``-stale`` once the
  answer says ``"stale": true`` (a revalidating cache must not keep a fresh-looking copy).
* A ``GET`` whose ``If-None-Match`` (``*``, or a list of tags, compared weakly: RFC 9110
  13.1.2) matches the tag of the snapshot the server holds for the route's product is
  answered ``304`` with the same three headers and no body, before the route runs: the
  server already holds that snapshot (:attr:`Cacheable.current`), so no Redis round trip.
  A tag of another snapshot runs the route, and its ``200`` becomes a ``304`` if the
  answer's own tag matches (a reader that read a newer snapshot than the watcher's;
  ``If-None-Match: *`` whenever the answer is a ``200``).
* Every other answer of those routes (``400``, ``404``, ``503``, a redirect) carries
  ``cache-control: no-store``: no cache keeps an error, and a ``503`` with the last
  answer marked stale is an error too. A ``200`` marked ``"stale": true`` keeps ``max-age``.
* ``If-Modified-Since`` is not used: a snapshot changes several times a second, a
  date has seconds. ``Last-Modified`` informs.

The header lines of an answer are made once per snapshot and target (:meth:`HttpCache.of_body`,
keyed by the target and checked against the body's first bytes, which name the snapshot),
not per request: the protocol's prepared answers (``api.prepared``, ``api.server``) write
them as they are, and :class:`CacheHeaders`, pure ASGI middleware, adds the same ones to
every other answer (``api.hot_reads`` and FastAPI's), so both paths send the same headers.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from email.utils import formatdate
from typing import Any

from starlette.routing import Match

DEFAULT_MAX_AGE_S = 1
"""``rankflow serve --cache-max-age``: how long a cache may serve an answer without asking."""
MAX_TARGETS = 10_000
"""Targets whose header lines are kept (per snapshot they change anyway); past this they start over."""
NO_STORE = (b"cache-control", b"no-store")

Held = tuple[int, int, bool]
"""A snapshot as the tags name it: its id, its ``published_at`` and whether its answers say ``"stale": true``."""

Current = Callable[[Any], "Held | None"]
"""``current(app state)``: the snapshot the server holds for a product's routes (:data:`Held`),
None when it holds none it may answer from (nothing read, Redis unreachable or without a usable snapshot)."""


@dataclass(frozen=True)
class Cacheable:
    """Routes whose answers come from one snapshot of a product: the paths starting with
    ``prefix`` (a ``GET`` ending with ``/stream`` is an event stream: never shortcut), and
    what the server holds of that product's snapshots (:data:`Current`)."""

    prefix: str
    current: Current


_SNAPSHOT_ID = re.compile(rb'"snapshot_id":(\d+)[,}]')
STALE = b'"stale":true'
"""What an answer past its staleness bound says (``connectors.snapshot_age.judged``)."""
STALE_WITHIN = 48
"""Where a body says ``"stale": true``, after its publish time: right after its ``age_ms`` (every
answer that says ``stale``: the listener rankings', the boards' and the activity's,
``connectors.snapshot_age.judged``); an answer that says so elsewhere (none does) would be tagged fresh."""
_PUBLISHED_AT = re.compile(rb'"published_at":(\d+)[,}]')
_TAG = re.compile(rb'[ \t]*(?:W/)?("[^"]*")[ \t]*(?:,|$)')


class Validators:
    """One answer's ``etag`` (weak), ``cache-control`` and ``last-modified``: as header lines
    (``lines``, for the protocol) and as ASGI headers (``headers``); ``opaque``, the tag's quoted part."""

    __slots__ = ("opaque", "lines", "control", "modified")

    def __init__(self, opaque: bytes, control: bytes, published_at: int) -> None:
        self.opaque, self.control = opaque, control
        self.modified = modified = http_date(published_at)
        # one format: a rank's validators are made per request (a new target almost every time)
        self.lines = b"etag: W/%s\r\ncache-control: %s\r\nlast-modified: %s\r\n" % (opaque, control, modified)

    @classmethod
    def made(cls, opaque: bytes, lines: bytes, control: bytes, modified: bytes) -> Validators:
        """Validators whose lines are made already (:class:`_Shared`)."""
        made = cls.__new__(cls)
        made.opaque, made.lines, made.control, made.modified = opaque, lines, control, modified
        return made

    @property
    def headers(self) -> list[tuple[bytes, bytes]]:
        """The same three headers for an ASGI answer (made when asked: the protocol writes ``lines``)."""
        return [(b"etag", b"W/" + self.opaque), (b"cache-control", self.control), (b"last-modified", self.modified)]

    def matched_by(self, if_none_match: bytes, star: bool = True) -> bool:
        """Whether ``If-None-Match: if_none_match`` holds this tag (weak comparison) or is ``*``
        (``star``: the answer is known to be a ``200``)."""
        return matches(if_none_match, self.opaque, star)


@functools.lru_cache(maxsize=64)
def tag_parts(snapshot_id: int, published_at: int, control: bytes) -> tuple[bytes, bytes, bytes]:
    """The validator lines of every target of one snapshot around the target's digest (:func:`target_digest`):
    ``(before, fresh end, stale end)``; a target's lines are ``before + digest + end``, as
    :meth:`HttpCache.of` makes them. Made once per snapshot (the kernel's ``BoardKeys.player_reply``
    joins them per request).

    >>> before, fresh, _ = tag_parts(7, 0, b"no-cache")
    >>> (before + b"<digest>" + fresh).decode().splitlines()
    ['etag: W/"7-0-<digest>"', 'cache-control: no-cache', 'last-modified: Thu, 01 Jan 1970 00:00:00 GMT']
    """
    tail = b"\r\ncache-control: %s\r\nlast-modified: %s\r\n" % (control, http_date(published_at))
    return b'etag: W/"%d-%d-' % (snapshot_id, published_at), b'"' + tail, b'-stale"' + tail


def target_digest(target: bytes) -> bytes:
    """A request target's part of its tags: 12 hex digits of its BLAKE2s."""
    return hashlib.blake2s(target, digest_size=6).hexdigest().encode()


def opaque_of(lines: bytes) -> bytes:
    """The quoted tag of validator ``lines`` (:attr:`Validators.lines`): after ``etag: W/``, up to its line's end.

    >>> opaque_of(b'etag: W/"7-0-ab"\\r\\ncache-control: no-cache\\r\\n')
    b'"7-0-ab"'
    """
    return lines[8:lines.index(b"\r\n")]


class _Shared:
    """What the validators of every target of one snapshot share: the bytes the answers start with
    up to its id and publish time (``first``), and per staleness the tag and the lines around the
    target's digest: a new target's validators are then its digest and two joins."""

    __slots__ = ("first", "snapshot", "parts")

    def __init__(self, first: bytes, snapshot: tuple[int, int], control: bytes) -> None:
        self.first, self.snapshot = first, snapshot
        tag = b'"%d-%d-' % snapshot
        tail = b"\r\ncache-control: %s\r\nlast-modified: %s\r\n" % (control, http_date(snapshot[1]))
        self.parts = [(tag, end, b"etag: W/" + tag, end + tail) for end in (b'"', b'-stale"')]  # fresh, stale


@functools.lru_cache(maxsize=64)
def http_date(published_at: int) -> bytes:
    """``published_at`` (ms) as an HTTP date: the same for every target of a snapshot, so made once
    per snapshot, not per target (``formatdate`` costs a rank's answer about as much as the rest of
    its validators: docs/benchmarks.md, "Capacity of one serve process")."""
    return formatdate(published_at / 1000, usegmt=True).encode()


def matches(if_none_match: bytes, opaque: bytes, star: bool = True) -> bool:
    """RFC 9110 13.1.2: ``*`` (when ``star``: any current answer), or a list of entity tags one of
    which is ``opaque`` (``W/`` ignored). A malformed list matches only up to where it is malformed.

    >>> matches(b'*', b'"a"'), matches(b'"x", W/"a"', b'"a"'), matches(b'W/"ab"', b'"a"'), matches(b'a', b'"a"')
    (True, True, False, False)
    """
    value = if_none_match.strip()
    if value == b"*":
        return star
    pos, end = 0, len(value)
    while pos < end:
        if value[pos] in b", \t":  # empty list elements are allowed
            pos += 1
            continue
        found = _TAG.match(value, pos)
        if found is None:
            return False
        if found.group(1) == opaque:
            return True
        pos = found.end()
    return False


def target_of(path: bytes, query: bytes) -> bytes:
    """The request target a tag names: the path as sent, ``?`` and the query if there is one."""
    return path + b"?" + query if query else path


class HttpCache:
    """The validators of the products' snapshot-backed answers (see the module's contract)."""

    def __init__(self, max_age_s: int, cacheable: Iterable[Cacheable]) -> None:
        self.control = b"public, max-age=%d" % max_age_s if max_age_s > 0 else b"no-cache"
        self.cacheable = tuple(cacheable)
        # first bytes, (snapshot id, published_at), fresh, stale (each made when first asked)
        self._by_target: dict[bytes, tuple[bytes, tuple[int, int], Validators | None, Validators | None]] = {}
        self._shared: _Shared | None = None  # the last snapshot's parts

    def route(self, path: str) -> Cacheable | None:
        """The product's snapshot-backed routes ``path`` is one of; None: not cacheable."""
        for cacheable in self.cacheable:
            if path.startswith(cacheable.prefix):
                return cacheable
        return None

    def of(self, target: bytes, snapshot_id: int, published_at: int, stale: bool = False) -> Validators:
        digest = target_digest(target)
        opaque = b'"%d-%d-%s%s"' % (snapshot_id, published_at, digest, b"-stale" if stale else b"")
        return Validators(opaque, self.control, published_at)

    def current(self, target: bytes, route: Cacheable, state: Any) -> Validators | None:
        """The validators of ``target``'s answer from the snapshot the server holds now; None: none held."""
        held = route.current(state)
        return None if held is None else self.of(target, *held)

    def of_body(self, target: bytes, body: bytes, path: str, state: Any) -> Validators | None:
        """The validators of ``body``, a ``200`` of ``target``: its ``snapshot_id`` and ``published_at``
        (an answer without a publish time, e.g. a song's: the held snapshot's when it is the same
        one); None when the body names no snapshot. Kept per target while the body's first
        bytes, up to the two numbers, are the same: per request, one lookup and one compare. Only
        the side asked (fresh or stale) is made: a player's rank is a new target almost every time."""
        kept = self._by_target.get(target)
        if kept is not None and body.startswith(kept[0]):
            end = len(kept[0])
            stale = body.find(STALE, end, end + STALE_WITHIN) >= 0
            made = kept[3] if stale else kept[2]
            if made is None:
                made = self.of(target, *kept[1], stale=stale)
                self._by_target[target] = (kept[0], kept[1], *((kept[2], made) if stale else (made, kept[3])))
            return made
        shared = self._shared
        if shared is None or not body.startswith(shared.first):
            sid = _SNAPSHOT_ID.search(body)
            if sid is None:
                return None
            at = _PUBLISHED_AT.search(body)
            if at is None:
                return self._held(target, path, state, int(sid.group(1)))
            shared = self._shared = _Shared(body[:max(sid.end(), at.end())], (int(sid.group(1)), int(at.group(1))),
                                            self.control)
        end = len(shared.first)
        stale = body.find(STALE, end, end + STALE_WITHIN) >= 0
        tag, tag_end, line, line_end = shared.parts[stale]
        digest = target_digest(target)
        made = Validators.made(tag + digest + tag_end, line + digest + line_end, self.control, http_date(shared.snapshot[1]))
        if len(self._by_target) >= MAX_TARGETS:
            self._by_target = {}
        self._by_target[target] = (shared.first, shared.snapshot, None, made) if stale else (
            shared.first, shared.snapshot, made, None)
        return made

    def _held(self, target: bytes, path: str, state: Any, snapshot_id: int) -> Validators | None:
        """The validators of an answer of snapshot ``snapshot_id`` that names no publish time: the
        held snapshot's, when it is the same one."""
        route = self.route(path)
        held = None if route is None else route.current(state)
        if held is None or held[0] != snapshot_id:
            return None
        return self.of(target, *held)


def request_header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    """The value of header ``name`` (lower case), several lines joined with ``, ``; None: absent."""
    values = [value for key, value in headers if key == name]
    return b", ".join(values) if values else None


class CacheHeaders:
    """Pure ASGI middleware: the validators on the snapshot-backed routes' ``200`` answers,
    ``no-store`` on their other answers, and the ``304`` of an ``If-None-Match`` that holds the
    current tag (see the module's contract). Any other request passes untouched."""

    def __init__(self, app: Any, cache: HttpCache, routes: Iterable[Any] = ()) -> None:
        """``routes``: the app's routes (FastAPI's), to name the route of a ``304``
        answered before routing (:func:`route_of`)."""
        self.app = app
        self.cache = cache
        self.routes = tuple(routes)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        cache = self.cache
        route = cache.route(scope["path"]) if scope["type"] == "http" and scope["method"] == "GET" else None
        if route is None:
            await self.app(scope, receive, send)
            return
        target = target_of(scope.get("raw_path") or scope["path"].encode(), scope["query_string"])
        state = scope["app"].state
        if_none_match = request_header(scope["headers"], b"if-none-match")
        if if_none_match is not None and not scope["path"].endswith("/stream"):
            held = cache.current(target, route, state)
            # ``*`` only once the route answered a 200: it may answer 404 for this target
            if held is not None and held.matched_by(if_none_match, star=False):
                route_of(scope, self.routes)  # counted in /metrics under its route, as if it had run
                await _not_modified(send, held)
                return
        start: dict[str, Any] | None = None

        async def with_headers(message: dict[str, Any]) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                if message["status"] == 200 and _is_json(message.get("headers", ())):
                    start = message  # its headers depend on the body
                    return
                if message["status"] != 200 and not _has(message.get("headers", ()), b"cache-control"):
                    message = {**message, "headers": [*message.get("headers", ()), NO_STORE]}
            elif message["type"] == "http.response.body" and start is not None:
                held_start, start = start, None
                validators = None
                if not message.get("more_body", False):
                    validators = cache.of_body(target, message.get("body", b""), scope["path"], state)
                if validators is not None and if_none_match is not None and validators.matched_by(if_none_match):
                    await _not_modified(send, validators)
                    return
                extra = validators.headers if validators is not None else [(b"cache-control", cache.control)]
                await send({**held_start, "headers": [*held_start.get("headers", ()), *extra]})
            await send(message)

        await self.app(scope, receive, with_headers)


def route_of(scope: dict[str, Any], routes: Iterable[Any]) -> None:
    """Put in ``scope`` the first of ``routes`` that takes it (``scope["route"]``, as routing does),
    for a request answered before routing: ``api.app.MeasureRequests`` counts each request under
    its route's name, and a ``304`` of a route is that route's, not "other". (The app's router
    holds the included routers, not their routes: the routes are given.)"""
    for route in routes:
        if route.matches(scope)[0] is Match.FULL:
            scope["route"] = route
            return


async def _not_modified(send: Any, validators: Validators) -> None:
    await send({"type": "http.response.start", "status": 304, "headers": validators.headers})
    await send({"type": "http.response.body", "body": b""})


def _is_json(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    return any(name == b"content-type" and value.startswith(b"application/json") for name, value in headers)


def _has(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> bool:
    return any(key.lower() == name for key, _ in headers)
