"""Rankings for readers: the top K, one song, and a live stream of changes.

Contract:

* ``GET /rankings?k=K`` -> ``{snapshot_id, published_at, age_ms, stale, positions,
  total_listeners, items: [{rank, song_id, listeners}]}``, every item from one
  snapshot. ``k`` defaults to 10 and must be in 1..K_max (``400`` otherwise). While
  Redis has no usable ranking: ``503`` with the reason and, if this process has seen
  one, the last ranking marked ``stale: true`` with its age.
* ``GET /rankings/recent?k=K`` -> ``{snapshot_id, published_at, age_ms, stale,
  positions, window_start, window_end, watermark, items: [{rank, song_id, plays}]}``:
  songs by plays (accepted starts) in the last ``--recent-minutes`` of event time
  (docs/semantics/windows.md 7), from the same snapshot as ``/rankings`` and with its conventions
  (``k``, ``400``, ``503`` and ``stale``); ``404`` when the flow publishes no recent
  plays (``--recent-minutes 0``).
* ``GET /songs/{song_id}`` -> ``{snapshot_id, song_id, listeners, rank}`` in the latest
  snapshot (the full count table is published with it, atomically, and this process
  follows it in memory); ``404`` when the song has no listeners. While Redis has no
  usable ranking: ``503`` with the reason and the last answer seen, marked ``stale``.
* ``GET /rankings/stream?k=K`` -> Server-Sent Events. The first ``ranking`` event
  carries the whole top K; later ones only the ranks whose song or count changed
  (``changed``), the songs that left (``removed``) and the list's ``size``, with the
  snapshot id; at most one event a second per client, coalescing what happened in
  between. A comment line every 15 s keeps idle connections open. A client reconnecting
  with ``Last-Event-ID`` (a snapshot id this process sent at in its last 32) gets first the
  changes since that event (no event if none), others the whole top K (``api.sse.History``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson
from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response, StreamingResponse

from rankflow.api import sse, stream_diff
from rankflow.api.http_cache import Cacheable
from rankflow.api.prepared import PreparedRoute
from rankflow.api.responses import Failure, STATUS, UsageErrorsAre400, error_response, json_response
from rankflow.api.schemas import Error, Responses, Unavailable, bounded, model, text
from rankflow.api.schemas_listeners import Ranking, Recent, Song
from rankflow.api.store import SnapshotCache
from rankflow.connectors.redis_publish import dumps_document
from rankflow.state.events import MAX_ID_CHARS

router = APIRouter(route_class=UsageErrorsAre400)  # k=ten is a 400, as on the other routes, never a 422

TOP_K = 10
"""Songs of a ranking when the query names no ``k``."""

Body = Callable[[dict[str, Any], int, bool], dict[str, Any]]
"""A ranking body of a snapshot, its first k items, stale or not: :func:`ranking_body`, :func:`recent_body`."""


class BodyCache:
    """Serialized ranking bodies per (snapshot, kind, k, stale), minus the per-request age.

    Every request of one snapshot returns the same items; only ``age_ms`` differs, so
    the JSON is built once per snapshot, kind (``ranking_body`` or ``recent_body``) and k,
    and the age is spliced in.
    """

    def __init__(self) -> None:
        self.snapshot: dict[str, Any] | None = None
        self.bodies: dict[tuple[Any, int, bool], tuple[bytes, bytes]] = {}
        self.rendered: dict[tuple[Any, int, bool], tuple[int, bytes]] = {}  # each body's last: its ms, its bytes

    def render(self, snap: dict[str, Any], k: int, stale: bool, error: str | None = None,
               kind: Body | None = None) -> bytes:
        # the snapshot itself, not its id: after Redis lost its data a new run's ids start over,
        # and a new snapshot with an old id must not be served the old one's bodies
        if snap is not self.snapshot:
            self.snapshot, self.bodies, self.rendered = snap, {}, {}
        kind = kind or ranking_body
        key = (kind, k, stale)
        parts = self.bodies.get(key) if error is None else None
        if parts is None:
            body = kind(snap, k, stale)
            body["age_ms"] = 0
            if error is not None:
                body = {"error": error, **body}
            head, _, tail = dumps_document(body).partition(b'"age_ms":0')
            parts = (head + b'"age_ms":', tail)
            if error is None:
                self.bodies[key] = parts
        now = int(time.time() * 1000)
        last = self.rendered.get(key) if error is None else None
        if last is not None and last[0] == now:
            return last[1]  # the same bytes in the same millisecond (a busy ranking is asked many times in one)
        made = parts[0] + b"%d" % max(0, now - snap["published_at"]) + parts[1]  # joined: see shared_cache.render
        if error is None:
            self.rendered[key] = (now, made)
        return made


def snapshot_head(snap: dict[str, Any], stale: bool) -> dict[str, Any]:
    """What every ranking body starts with: which snapshot, how old, whether stale, its positions."""
    return {
        "snapshot_id": snap["snapshot_id"],
        "published_at": snap["published_at"],
        "age_ms": max(0, int(time.time() * 1000) - snap["published_at"]),
        "stale": stale,
        "positions": snap["positions"],
    }


def ranking_body(snap: dict[str, Any], k: int, stale: bool) -> dict[str, Any]:
    return {**snapshot_head(snap, stale), "total_listeners": snap["total_listeners"], "items": snap["items"][:k]}


def recent_body(snap: dict[str, Any], k: int, stale: bool) -> dict[str, Any]:
    """``GET /rankings/recent``: the snapshot's recent plays, its first ``k`` items."""
    recent = snap["recent"]
    return {**snapshot_head(snap, stale), "window_start": recent["window_start"], "window_end": recent["window_end"],
            "watermark": recent["watermark"], "items": recent["items"][:k]}


def _check_k(k: int, snap: dict[str, Any] | None) -> str | None:
    """The usage error of ``k``, if any: below 1 whatever there is, above the K_max of the
    snapshot when there is one (as the activity routes: ``connectors.activity_read``)."""
    if k < 1:
        return f"k must be between 1 and K_max, got {k}"
    if snap is not None and k > snap["k_max"]:
        return f"k must be between 1 and {snap['k_max']} (K_max), got {k}"
    return None


def ranking_response(request: Request, k: int, kind: Body) -> Response:
    """``kind`` (:func:`ranking_body` or :func:`recent_body`) of the cached snapshot: ``400``
    for a bad k, ``503`` while Redis has no usable ranking (the last one seen marked stale)."""
    cache: SnapshotCache = request.app.state.cache
    snap = cache.snapshot
    if (problem := _check_k(k, snap)) is not None:
        return error_response(STATUS[Failure.USAGE], problem)
    if snap is None:
        return json_response({"error": cache.problem}, STATUS[Failure.NOT_PUBLISHED])
    if kind is recent_body and snap.get("recent") is None:
        if not cache.fresh:
            return json_response({"error": cache.problem}, STATUS[Failure.NOT_PUBLISHED])
        return error_response(STATUS[Failure.MISSING],
                              "no recent plays in the latest snapshot: the flow runs with --recent-minutes 0")
    bodies: BodyCache = request.app.state.bodies
    if not cache.fresh:
        return Response(bodies.render(snap, k, True, cache.problem, kind), STATUS[Failure.NOT_PUBLISHED],
                        media_type="application/json")
    too_old = time.time() * 1000 - snap["published_at"] > request.app.state.settings.stale_after_ms
    return Response(bodies.render(snap, k, too_old, kind=kind), media_type="application/json")


def ready_ranking(state: Any, params: tuple[str, ...], k: int | None) -> bytes | None:
    """``GET /rankings?k=K`` as :func:`ranking_response` answers it with a ``200`` (a fresh snapshot,
    a good k), from the bodies of the current snapshot (``api.prepared``); None otherwise."""
    cache: SnapshotCache = state.cache
    snap = cache.snapshot
    assert k is not None
    if snap is None or not cache.fresh or _check_k(k, snap) is not None:
        return None
    too_old = time.time() * 1000 - snap["published_at"] > state.settings.stale_after_ms
    bodies: BodyCache = state.bodies
    return bodies.render(snap, k, too_old, kind=ranking_body)


PREPARED = (PreparedRoute("/rankings", "k", TOP_K, ready_ranking),)


def held(state: Any) -> tuple[int, int, bool] | None:
    """The snapshot the listener routes answer from now, if it is Redis's current one, and whether
    it is too old (its rankings say ``"stale": true``) (``api.http_cache``)."""
    cache: SnapshotCache = state.cache
    snap = cache.snapshot
    if snap is None or not cache.fresh:
        return None
    at = snap["published_at"]
    return snap["snapshot_id"], at, time.time() * 1000 - at > state.settings.stale_after_ms


CACHEABLE = (Cacheable("/rankings", held), Cacheable("/songs/", held))
"""Every listener read answers from the cached snapshot: validators, and ``304`` without Redis."""


def k_query() -> Any:
    """``k`` of every ranking route: at least 1, at most the snapshot's K_max (known at run time)."""
    return Query(TOP_K, description="how many songs, 1..K_max (the snapshot's k_max: 400 beyond it)",
                 **bounded(minimum=1))


ERRORS: Responses = {400: model(Error, "k below 1, beyond K_max or not an integer"),
          503: model(Unavailable, "no usable ranking; the last one seen, if any, comes with it marked stale")}


@router.get("/rankings", summary="The top K songs of the latest snapshot",
            responses={200: model(Ranking, "the top k, every item from one snapshot"), **ERRORS})
async def get_rankings(request: Request, k: int = k_query()) -> Response:
    return ranking_response(request, k, ranking_body)


@router.get("/rankings/recent", summary="The top K songs by plays in the last minutes, of the latest snapshot",
            responses={200: model(Recent, "the top k by plays in the window, of the same snapshot as /rankings"),
                       400: ERRORS[400],
                       404: model(Error, "the flow publishes no recent plays (--recent-minutes 0)"),
                       503: ERRORS[503]})
async def get_recent(request: Request, k: int = k_query()) -> Response:
    return ranking_response(request, k, recent_body)


@router.get("/songs/{song_id}", summary="One song's listeners and rank in the latest snapshot",
            responses={200: model(Song, "the song's count and rank"),
                       404: model(Error, "the song has no listeners"),
                       503: model(Unavailable, "no usable ranking; the last answer seen, if any, comes with it "
                                               "marked stale")})
async def get_song(request: Request,
                   song_id: str = Path(examples=["song_17"], **bounded(minLength=1, maxLength=MAX_ID_CHARS))) -> Response:
    cache: SnapshotCache = request.app.state.cache
    song = cache.song(song_id)
    if not cache.fresh:
        return json_response({"error": cache.problem, **(song or {}), "stale": True}, STATUS[Failure.NOT_PUBLISHED])
    if song is None:
        return error_response(STATUS[Failure.MISSING], f"song {song_id!r} has no listeners in the latest snapshot")
    return json_response(song)


def diff_event(previous: list[dict[str, Any]] | None, snap: dict[str, Any], k: int) -> dict[str, Any] | None:
    """What changed in the top K since ``previous`` (everything if there is none): ``api.stream_diff``."""
    changes = stream_diff.diff(previous, snap["items"][:k], "song_id")
    if changes is None:
        return None
    return {"snapshot_id": snap["snapshot_id"], "published_at": snap["published_at"],
            "total_listeners": snap["total_listeners"], **changes}


STREAM_KEY = "top"
"""The one stream of ranked items in the listeners' :class:`api.sse.History` (k is cut when sent)."""


class RankingFeed:
    """A ``/rankings/stream`` subscriber's :class:`api.sse.Feed`: the changes of its top K.

    ``history``: the items each snapshot sent had (shared by the subscribers); ``resume``: the
    ``Last-Event-ID`` of a reconnecting client: when ``history`` has it, the first event is the
    diff against what that event left the client with (none if nothing changed), else the whole top K."""

    def __init__(self, cache: SnapshotCache, k: int, history: sse.History | None = None,
                 resume: int | None = None) -> None:
        self.cache, self.k = cache, k
        self.history = history or sse.History()
        known = self.history.at(STREAM_KEY, resume)
        self.sent: list[dict[str, Any]] | None = None if known is None else known[:k]
        self.last_id: int | None = None

    def changed(self) -> bool:
        snap = self.cache.snapshot
        return snap is not None and snap["snapshot_id"] != self.last_id

    async def message(self) -> bytes | None:
        snap = self.cache.snapshot
        assert snap is not None  # changed() saw one, and the cache keeps its last
        event = diff_event(self.sent, snap, self.k)
        self.last_id = snap["snapshot_id"]
        self.history.record(STREAM_KEY, snap["snapshot_id"], snap["items"])  # the snapshot's own list
        if event is None:
            return None
        self.sent = snap["items"][:self.k]
        return b"event: ranking\nid: %d\ndata: %s\n\n" % (snap["snapshot_id"], orjson.dumps(event))


@router.get("/rankings/stream", summary="Server-Sent Events: changes of the top K",
            response_class=StreamingResponse,
            responses={200: text("text/event-stream", "`ranking` events: the whole top k first, then what changed "
                                                      "(changed, removed, size, snapshot_id), at most one a second"),
                       400: ERRORS[400]})
async def stream_rankings(request: Request, k: int = k_query()) -> Response:
    cache: SnapshotCache = request.app.state.cache
    if (problem := _check_k(k, cache.snapshot)) is not None:
        return error_response(STATUS[Failure.USAGE], problem)
    feed = RankingFeed(cache, k, sse.history(request.app.state, "rankings"), sse.last_event_id(request))
    return sse.event_stream(request, cache, feed)
