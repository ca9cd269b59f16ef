"""The activity rankings for readers: a workspace's top, the global top, one channel, a stream.

Contract (docs/semantics/windows.md 4 and 6; every answer is exactly what ``connectors.activity_read``
gives, the CLI's ``rankflow activity ... --json``, so it names its ``snapshot_id``, its
``published_at`` (the snapshot document's), ``age_ms``, its age when answered, and ``stale``,
whether that age is over ``rankflow serve --stale-after-ms``, the listeners' rule; the
streams' events say the same, as of when each is sent):

* ``GET /activity/global/top?k=K`` -> ``{snapshot_id, published_at, age_ms, stale, window_start, window_end,
  watermark, items: [{rank, workspace_id, channel_id, count}]}`` (with
  ``--global-summary``: ``count_low`` and ``count_high`` in place of ``count``).
* ``GET /activity/{workspace}/top?k=K`` -> ``{snapshot_id, published_at, age_ms, stale, workspace_id, window_start,
  window_end, watermark, items: [{rank, channel_id, count}]}``; a workspace without
  counts has ``items: []``.
* ``GET /activity/{workspace}/channels/{channel}`` -> ``{snapshot_id, published_at, age_ms, stale, workspace_id,
  channel_id, count, rank}`` (the rank in its workspace, exact for every channel);
  ``404 {"error"}`` when the channel has no count in the window.
* ``GET /activity/{workspace}/stream`` -> Server-Sent Events: an ``activity`` event at
  once with the workspace's top 10 (``K_max`` if smaller; ``full: true``, every entry in
  ``changed``), then one whenever a new snapshot changes it (its channels, ranks or counts:
  a window that moves without changing them is no message), at most one a second per
  subscriber, coalescing what happened in between, with only what changed
  (``api.stream_diff``: the ``changed`` entries by rank, the ``removed`` channel ids, the
  top's ``size``). Each carries the fields of ``GET /activity/{workspace}/top?k=10`` but its
  ``items`` (its snapshot id and window), and has the snapshot id as the SSE ``id``. A
  comment line every 15 s keeps idle connections open; streams end when the server stops.
  A client reconnecting with ``Last-Event-ID`` (known to this process: ``api.sse.History``)
  gets first the changes since that event (none if the top is the same), else a full event.
* ``GET /activity`` -> the current snapshot: ``{snapshot_id, published_at, age_ms, stale,
  watermark, window_start, window_end, bucket_ms, window_buckets, count, k_max, active_pairs,
  now, watermark_lag_ms, published_lag_ms}``: ``now`` is the server's clock (ms),
  ``age_ms = now - published_at``,
  ``watermark_lag_ms = now - watermark`` and ``published_lag_ms = published_at -
  watermark`` (null without a watermark). The dashboard's activity view reads it.

``k`` defaults to 10 and must be in 1..K_max (the snapshot's ``k_max``): otherwise, or
when it is not an integer, ``400 {"error"}``, never clamped. It is checked before Redis
does any work for it, against the snapshot the reader holds
(``connectors.activity_read.check_k_known``): a k out of range reads no channel. Before the first snapshot
(or while Redis cannot be reached): ``503 {"error"}`` saying which.

**Addressing.** Ids may hold any characters. In a path a workspace id may hold ``/`` (as
is or as ``%2F``; any other character percent-encoded): it is the shortest part of the
path the route's rest still fits (``/activity/a/b/top`` is workspace ``a/b``), and a
channel id is the rest of the path. Two cases cannot be told apart in a path, so the
path forms give them one meaning and the **query forms** below reach every id:
``/activity/global/top`` is the global ranking (not the top of a workspace named
``global``, whose channels and stream are still at their paths), and a path holding
``/channels/`` is a channel lookup split at the first ``/channels/`` (a workspace id
holding ``/channels/`` is read with the query forms). The query forms, for any ids:

* ``GET /activity/top?workspace=WS&k=K``, ``GET /activity/channel?workspace=WS&channel=CH``,
  ``GET /activity/stream?workspace=WS``: the same answers and errors as the path forms.

Each query is one script call on the async Redis client: the event loop never waits on
Redis. The streams (``api.sse``) share one watcher per process
(``api.activity_watch.ActivityWatch``, one small script call per poll interval) and, per
snapshot and workspace, one read of its top 10 (``api.shared_cache.SharedTops``), however
many subscribers there are.

Snapshot documents may hold integers beyond 64 bits (a watermark: docs/semantics/windows.md 1 sets no
upper bound on ``ts``), which orjson cannot write: such an answer is written by the
stdlib ``json`` (``api.responses.json_response``), exactly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response, StreamingResponse

from rankflow.api import activity_watch, schemas_activity, sse, stream_diff
from rankflow.api.activity_watch import UNAVAILABLE
from rankflow.api.http_cache import Cacheable
from rankflow.api.paths import register_id
from rankflow.api.responses import Errors, Failure, UsageErrorsAre400, json_response
from rankflow.api.schemas import bounded, model, text
from rankflow.api.shared_cache import SharedTops, judged_by
from rankflow.api.watch import Watched
from rankflow.connectors.activity_read import AsyncActivityReader, NoCount, NoSnapshot
from rankflow.connectors.snapshot_age import age_ms, is_stale, judged

log = logging.getLogger("rankflow.api")

router = APIRouter(route_class=UsageErrorsAre400)  # a k FastAPI cannot read is a 400 too, never a 422

TOP = 10

ERRORS = Errors("activity", "the activity rankings", {
    Failure.USAGE: (ValueError,), Failure.MISSING: (NoCount,), Failure.NOT_PUBLISHED: (NoSnapshot,),
    Failure.UNREACHABLE: UNAVAILABLE}, {
    400: "a usage error: k outside 1..K_max (the snapshot's k_max) or not an integer; "
         "in a query form, an id missing or empty",
    404: "the channel has no count in the snapshot's window",
    503: "no activity snapshot published yet, or Redis cannot be reached",
})

Question = Callable[[AsyncActivityReader], Awaitable[dict[str, Any]]]


def k_query() -> Any:
    """``k`` of the rankings: at least 1, at most the snapshot's K_max (known at run time: 400 beyond)."""
    return Query(TOP, description="how many items, 1..K_max (the snapshot's k_max)", **bounded(minimum=1))


EXAMPLES = {"workspace": ["acme"], "channel": ["general"]}


def id_query(what: str) -> Any:
    return Query(..., min_length=1, description=f"the {what} id (any characters)", examples=EXAMPLES[what])


def id_path(what: str) -> Any:
    return Path(description=f"the {what} id", examples=EXAMPLES[what], **bounded(minLength=1))


WHY = ERRORS.openapi(400, 404, 503)
STREAM = text("text/event-stream", "`activity` events: the workspace's top 10 (K_max if smaller) at once "
                                   "(full), then what changed (changed, removed, size, snapshot_id) when a "
                                   "snapshot changes it")


# ``{workspace:workspace}``: a workspace id that may hold ``/`` (docs/semantics/windows.md 1 allows any
# characters): the shortest match the rest of the route still fits, as the boards' game ids.
register_id("workspace", ".+?")


async def ask(request: Request, query: Question) -> dict[str, Any] | Response:
    """The reader's answer, or the error response its failure calls for."""
    return await ERRORS.ask(request.app.state.activity, query)


async def answer(request: Request, query: Question) -> Response:
    """The answer of ``query(reader)`` with its ``stale`` now, or the error response its failure calls for."""
    state = request.app.state
    got = await ERRORS.ask(state.activity, query)
    return got if isinstance(got, Response) else json_response(judged(got, state.settings.stale_after_ms))


def with_lags(snapshot: dict[str, Any], now_ms: int, stale_after_ms: int) -> dict[str, Any]:
    """``GET /activity``: the snapshot, its age and whether that is stale (right after its publish
    time, as in every answer: ``api.http_cache`` looks for it there), and how far its watermark is
    behind now and its publication.

    >>> with_lags({"snapshot_id": 7, "published_at": 1500, "watermark": 1000}, 4000, 10_000)
    {'snapshot_id': 7, 'published_at': 1500, 'age_ms': 2500, 'stale': False, 'watermark': 1000, 'now': 4000, 'watermark_lag_ms': 3000, 'published_lag_ms': 500}
    """
    w, at = snapshot["watermark"], snapshot["published_at"]
    return {"snapshot_id": snapshot["snapshot_id"], "published_at": at, "age_ms": age_ms(at, now_ms),
            "stale": is_stale(at, stale_after_ms, now_ms), **snapshot, "now": now_ms,
            "watermark_lag_ms": None if w is None else now_ms - w,
            "published_lag_ms": None if w is None else at - w}


# -- the routes: the global top first, so that "global" there is never taken for a workspace --

@router.get("/activity", summary="The current activity snapshot: its window, watermark and the watermark's lag",
            responses={200: model(schemas_activity.Current, "the current snapshot and its lags"), 503: WHY[503]})
async def current(request: Request) -> Response:
    got = await ask(request, lambda reader: reader.snapshot())
    settings = request.app.state.settings
    return got if isinstance(got, Response) else json_response(with_lags(got, int(time.time() * 1000),
                                                                             settings.stale_after_ms))


@router.get("/activity/global/top", summary="The most active channels across workspaces (docs/semantics/windows.md 4)",
            responses={200: model(schemas_activity.GlobalTop, "the first k channels across workspaces"),
                       400: WHY[400], 503: WHY[503]})
async def global_top(request: Request, k: int = k_query()) -> Response:
    return await answer(request, lambda reader: reader.global_top(k))


@router.get("/activity/top", summary="A workspace's most active channels, the workspace id in the query (any id)",
            responses={200: model(schemas_activity.WorkspaceTop, "the workspace's first k channels"),
                       400: WHY[400], 503: WHY[503]})
async def top_by_query(request: Request, workspace: str = id_query("workspace"), k: int = k_query()) -> Response:
    return await answer(request, lambda reader: reader.top(workspace, k))


@router.get("/activity/channel", summary="One channel's count and rank in its workspace, the ids in the query",
            responses={200: model(schemas_activity.ChannelCount, "the channel's count and rank in its workspace"),
                       **WHY})
async def channel_by_query(request: Request, workspace: str = id_query("workspace"),
                           channel: str = id_query("channel")) -> Response:
    return await answer(request, lambda reader: reader.channel(workspace, channel))


@router.get("/activity/stream", summary="Server-Sent Events: a workspace's top 10 when it changes (id in the query)",
            response_class=StreamingResponse, responses={200: STREAM, 400: WHY[400], 503: WHY[503]})
async def stream_by_query(request: Request, workspace: str = id_query("workspace")) -> Response:
    return await start_stream(request, workspace)


@router.get("/activity/{workspace:workspace}/channels/{channel:rest}",
            summary="One channel's count and rank in its workspace",
            responses={200: model(schemas_activity.ChannelCount, "the channel's count and rank in its workspace"),
                       404: WHY[404], 503: WHY[503]})
async def channel(request: Request, workspace: str = id_path("workspace"),
                  channel: str = id_path("channel")) -> Response:
    return await answer(request, lambda reader: reader.channel(workspace, channel))


@router.get("/activity/{workspace:workspace}/top", summary="A workspace's most active channels (docs/semantics/windows.md 4)",
            responses={200: model(schemas_activity.WorkspaceTop, "the workspace's first k channels"),
                       400: WHY[400], 503: WHY[503]})
async def top(request: Request, workspace: str = id_path("workspace"), k: int = k_query()) -> Response:
    return await answer(request, lambda reader: reader.top(workspace, k))


@router.get("/activity/{workspace:workspace}/stream",
            summary="Server-Sent Events: a workspace's top 10 when it changes",
            response_class=StreamingResponse, responses={200: STREAM, 503: WHY[503]})
async def stream(request: Request, workspace: str = id_path("workspace")) -> Response:
    return await start_stream(request, workspace)


CACHEABLE = (Cacheable("/activity", activity_watch.held),)
"""Every activity read names its snapshot: validators, and ``304`` for the watcher's without Redis."""


# -- the streams ------------------------------------------------------------------------------

KEY = "channel_id"
"""What names an activity entry in an event's ``removed`` (``api.stream_diff``)."""


def activity_event(held: list[dict[str, Any]] | None, top: dict[str, Any]) -> bytes | None:
    """The ``activity`` event taking a client from ``held`` to ``top`` (None: it holds it already)."""
    body = stream_diff.event(held, top, KEY)
    return None if body is None else stream_diff.message("activity", top["snapshot_id"], body)


class ActivityFeed:
    """One subscriber's :class:`api.sse.Feed`: ``first`` is the top read at ``seen``, the
    watcher's version before the read; ``held``: what a resuming client holds (None: nothing).
    :attr:`first` is the stream's first event (None: the client holds ``first`` already)."""

    def __init__(self, watch: Watched, tops: SharedTops, workspace: str, k: int, first: dict[str, Any],
                 seen: Hashable | None, history: sse.History | None = None,
                 held: list[dict[str, Any]] | None = None) -> None:
        self.watch, self.tops, self.workspace, self.k = watch, tops, workspace, k
        self.first = activity_event(held, judged_by(tops, first))
        self.sent, self.seen = first["items"], seen
        self.history = history or sse.History()
        self.history.record((workspace, k), first["snapshot_id"], self.sent)

    def changed(self) -> bool:
        return self.watch.version != self.seen

    async def message(self) -> bytes | None:
        self.seen = self.watch.version
        if self.seen is None:
            return None  # nothing readable now (Redis down, or its data lost): wait for a snapshot
        try:
            top = await self.tops.top(self.workspace, self.k)
        except (NoSnapshot, ValueError, *UNAVAILABLE) as exc:  # ValueError: a new run's smaller K_max
            log.warning("activity stream %r: %r", self.workspace, exc)
            return None  # the next snapshot tries again
        self.history.record((self.workspace, self.k), top["snapshot_id"], top["items"])
        message = activity_event(self.sent, judged_by(self.tops, top))
        if message is not None:
            self.sent = top["items"]
        return message


async def start_stream(request: Request, workspace: str) -> Response:
    watch: Watched = request.app.state.activity_watch
    seen = watch.version
    tops: SharedTops = request.app.state.activity_tops

    async def first_top(reader: AsyncActivityReader) -> dict[str, Any]:
        snapshot = await reader.snapshot()
        k = min(TOP, snapshot["k_max"])
        return {"k": k, "top": await tops.top(workspace, k)}

    got = await ask(request, first_top)
    if isinstance(got, Response):
        return got
    history = sse.history(request.app.state, "activity")
    held = history.at((workspace, got["k"]), sse.last_event_id(request))  # what the client last got, if known
    feed = ActivityFeed(watch, tops, workspace, got["k"], got["top"], seen, history, held)
    return sse.event_stream(request, watch, feed, feed.first)
