"""Reads that every request and stream of one snapshot shares: :class:`SharedTops`.

Contract: :meth:`SharedTops.top` answers as the reader's ``top(*query)`` does (the
boards' ``(game, board, n)``, the activity rankings' ``(workspace, k)``), but while the
watcher (``api.watch.Watched``) names a version, the first request of a query reads it
and every other request of that query and version shares the read: Redis sees one call
per query and snapshot, whatever the number of requests. An answer is thus at most one
poll interval behind the newest snapshot, and still wholly from one snapshot. Only
answers are kept: a failed read (no such board, Redis down) is asked again; while the
watcher names no version (not read yet, Redis unreachable) every request reads.
At most ``limit`` answers are kept per version; past this they start over.

:meth:`SharedTops.top_bytes` is the same answer as JSON (``api.responses.json_response``'s
bytes), encoded once per query and version: a top of 100 entries costs more to encode
than to serve, and a snapshot changes a few times a second. :meth:`SharedTops.ready` is
that encoding if it is already made (``api.prepared``), or, when the answers are at hand in
process (``at_hand``: the boards' mirror), made then: a new snapshot's first request of a
query need not take the slower path.

An answer names its snapshot's ``published_at`` and its ``age_ms`` (``connectors.snapshot_age``):
a kept answer is the read's, but its age is the request's. :meth:`SharedTops.top` gives each
request a copy with its age now; the encoding is kept in two parts around the age's digits,
which each request (a prepared one too) fills in with its age now, as ``api.rankings``'
``BodyCache`` does for the listeners. Given the service's staleness bound (``stale_after_ms``,
``rankflow serve --stale-after-ms``), the encoding also says ``"stale"`` right after the age,
decided per request by the same rule (``connectors.snapshot_age.is_stale``) and written into
the same two parts: no request encodes JSON. :meth:`SharedTops.top` (what the streams share)
says no ``stale``: a route that answers it adds it (``connectors.snapshot_age.judged``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from typing import Any

from rankflow.api.watch import Watched
from rankflow.connectors.redis_publish import dumps_document
from rankflow.connectors.snapshot_age import age_ms, aged, judged, now_ms

Encoded = tuple[bytes, bytes, "int | None", "int | None"]
"""An answer's JSON before and after its age's digits (and, with a staleness bound, its
``"stale"``), its ``published_at`` (None: no age to fill in, the first part is the whole
answer) and the staleness bound (None: the answer says no ``stale``)."""

_STALE_SLOT = b'"age_ms":0,"stale":false'


def encode(answer: dict[str, Any], stale_after_ms: int | None = None) -> Encoded:
    """``answer``'s JSON cut where its ``age_ms`` (and its ``stale``) go (:func:`render` puts them there).

    >>> encode({"snapshot_id": 7, "published_at": 1000, "age_ms": 5, "items": []})
    (b'{"snapshot_id":7,"published_at":1000,"age_ms":', b',"items":[]}', 1000, None)
    >>> encode({"snapshot_id": 7, "published_at": 1000, "age_ms": 5, "items": []}, 500)
    (b'{"snapshot_id":7,"published_at":1000,"age_ms":', b',"items":[]}', 1000, 500)
    """
    at = answer.get("published_at")
    if at is None or "age_ms" not in answer:
        return dumps_document(answer), b"", None, None
    if stale_after_ms is None:
        head, _, tail = dumps_document({**answer, "age_ms": 0}).partition(b'"age_ms":0')  # the first key of that name
        return head + b'"age_ms":', tail, at, None
    # the slot's first occurrence: the answer's own, before its items
    head, _, tail = dumps_document(judged({**answer, "age_ms": 0}, stale_after_ms)).partition(_STALE_SLOT)
    return head + b'"age_ms":', tail, at, stale_after_ms


def render(encoded: Encoded, now: int | None = None) -> bytes:
    """The encoded answer with its age at ``now`` (ms; by default now), and whether that is stale.

    >>> render((b'{"age_ms":', b'}', 0, 500))[-14:], render((b'{"x":1}', b'', None, None))
    (b',"stale":true}', b'{"x":1}')
    """
    head, tail, at, bound = encoded
    age = age_ms(at, now)
    if age is None:
        return head
    # joined, not formatted: ``bytes % (..., tail)`` grows its buffer as it goes, and a top of 100
    # (some 8 KB) cost a request 15-20 us that way against 2-5 joined (docs/benchmarks.md)
    if bound is None:
        return head + b"%d" % age + tail
    return head + (b'%d,"stale":true' if age > bound else b'%d,"stale":false') % age + tail

MAX_SHARED_TOPS = 10_000
"""Answers kept for one snapshot (the queries asked for); past this they start over."""


def judged_by(tops: SharedTops, answer: dict[str, Any]) -> dict[str, Any]:
    """``answer`` (a :meth:`SharedTops.top`) with ``"stale"`` after its age by the bound of ``tops``
    (the service's ``--stale-after-ms``): what a stream's event says, as the route's answer says it."""
    return answer if tops.stale_after_ms is None else judged(answer, tops.stale_after_ms)


class SharedTops:
    """Each query's top of the watcher's current snapshot, read once and shared."""

    def __init__(self, reader: Any, watch: Watched, limit: int = MAX_SHARED_TOPS,
                 stale_after_ms: int | None = None, at_hand: Callable[..., dict[str, Any] | None] | None = None) -> None:
        """``stale_after_ms``: the bound past which :meth:`top_bytes` says ``"stale": true``
        (``rankflow serve --stale-after-ms``); None: it says no ``stale``. ``at_hand(*query)``:
        the top of the watcher's current version read without waiting (an in-process copy that
        the watcher is: ``api.board_mirror``), or None when it has none; :meth:`ready` then
        encodes a query's first answer of a version itself."""
        self.reader = reader
        self.watch = watch
        self.limit = limit
        self.stale_after_ms = stale_after_ms
        self.at_hand = at_hand
        self._version: Hashable | None = None
        self._reads: dict[tuple[Any, ...], asyncio.Future[dict[str, Any]]] = {}
        self._encoded: dict[tuple[Any, ...], Encoded] = {}  # of self._version's answers
        self._rendered: dict[tuple[Any, ...], tuple[int, Encoded, bytes]] = {}  # each query's last: ms, encoding, bytes

    async def top(self, *query: Any) -> dict[str, Any]:
        """The shared read's answer, with its ``age_ms`` now."""
        return aged(await self._top(*query))

    async def _top(self, *query: Any) -> dict[str, Any]:
        version = self.watch.version
        if version is None:
            # nothing is known current: forget what was read (after Redis lost its data a new run's
            # snapshot ids start over, and a new snapshot must not get an old one's reads)
            self._version, self._reads, self._encoded = None, {}, {}
            return await self.reader.top(*query)
        if version != self._version or len(self._reads) >= self.limit:
            self._version, self._reads, self._encoded = version, {}, {}
        read = self._reads.get(query)
        if read is None:
            read = self._reads[query] = asyncio.ensure_future(self.reader.top(*query))
            read.add_done_callback(self._forget_failure(query))
        return await asyncio.shield(read)  # a request that leaves must not cancel the others' read

    async def top_bytes(self, *query: Any) -> bytes:
        """:meth:`top` as JSON bytes, encoded once per query and version (the age, and with a
        staleness bound ``stale``, filled in now)."""
        version = self.watch.version
        if version is not None and version == self._version:
            encoded = self._encoded.get(query)
            if encoded is not None:
                return render(encoded)
        encoded = encode(await self._top(*query), self.stale_after_ms)
        if version is not None and version == self._version and query in self._reads:
            self._encoded[query] = encoded  # the answer of this version's read: shared like it
        return render(encoded)

    def ready(self, *query: Any) -> bytes | None:
        """:meth:`top_bytes` if it is already encoded for the watcher's current version; None
        otherwise (nothing read or encoded yet for it). O(1), no await (``api.prepared``): the age
        is filled in now, so a prepared answer's ``age_ms`` is the request's."""
        version = self.watch.version
        if version is None:
            return None
        if version != self._version:
            if self.at_hand is None:
                return None
            self._version, self._reads, self._encoded = version, {}, {}
        encoded = self._encoded.get(query)
        if encoded is None:
            # a new snapshot's first request of this query: read in process when the copy is at hand
            # (once per query and snapshot) rather than sent down the ASGI path
            answer = None if self.at_hand is None else self.at_hand(*query)
            if answer is None:
                return None
            if len(self._encoded) >= self.limit:
                self._encoded = {}
            encoded = self._encoded[query] = encode(answer, self.stale_after_ms)
        now = now_ms()
        last = self._rendered.get(query)
        if last is not None and last[0] == now and last[1] is encoded:
            return last[2]  # the same bytes in the same millisecond: a busy top is asked many times in one
        body = render(encoded, now)
        if len(self._rendered) >= self.limit:
            self._rendered = {}
        self._rendered[query] = (now, encoded, body)
        return body

    def _forget_failure(self, query: tuple[Any, ...]) -> Callable[[asyncio.Future[dict[str, Any]]], None]:
        """Only answers are kept: a failed read is asked again."""
        def done(read: asyncio.Future[dict[str, Any]]) -> None:
            if read.cancelled() or read.exception() is not None:  # retrieved: never "never retrieved"
                if self._reads.get(query) is read:
                    del self._reads[query]
        return done
