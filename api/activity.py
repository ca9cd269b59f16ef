"""The activity rankings for readers: a workspace's top, the global top, one channel, a stream.

Contract (docs/semantics/windows.md 4 and 6; every answer is exactly what ``connectors.activity_read``
gives, the CLI's ``rankflow activity ... --json``, so it names its ``snapshot_id``):

* ``GET /activity/global/top?k=K`` -> ``{snapshot_id, window_start, window_end,
  watermark, items: [{rank, workspace_id, channel_id, count}]}`` (with
  ``--global-summary``: ``count_low`` and ``count_high`` in place of ``count``).
* ``GET /activity/{workspace}/top?k=K`` -> ``{snapshot_id, workspace_id, window_start,
  window_end, watermark, items: [{rank, channel_id, count}]}``; a workspace without
  counts has ``items: []``.
* ``GET /activity/{workspace}/channels/{channel}`` -> ``{snapshot_id, workspace_id,
  channel_id, count, rank}`` (the rank in its workspace, exact for every channel);
  ``404 {"error"}`` when the channel has no count in the window.
* ``GET /activity/{workspace}/stream`` -> Server-Sent Events: an ``activity`` event at
  once with the workspace's top 10 (``K_max`` if smaller), then one whenever a new
  snapshot changes it (its channels, ranks or counts: a window that moves without
  changing them is no message), at most one a second per subscriber, coalescing what
  happened in between. Each carries what ``GET /activity/{workspace}/top?k=10`` gives,
  so it names its snapshot id and window, and has the snapshot id as the SSE ``id``. A
  comment line every 15 s keeps idle connections open; streams end when the server stops.
* ``GET /activity`` -> the current snapshot: ``{snapshot_id, published_at, watermark,
  window_start, window_end, bucket_ms, window_buckets, count, k_max, active_pairs, now,
  watermark_lag_ms, published_lag_ms}``: ``now`` is the server's clock (ms),
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
Redis. The streams share one watcher per process (:class:`ActivityWatch`, one small
script call per poll interval) and, per snapshot and workspace, one read of its top 10
(:class:`SharedTops`), however many subscribers there are.

Snapshot documents may hold integers beyond 64 bits (a watermark: docs/semantics/windows.md 1 sets no
upper bound on ``ts``), which orjson cannot write: such an answer is written by the
stdlib ``json`` (:func:`activity_json`), exactly.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
import redis
from fastapi import APIRouter, Query, Request
from fastapi.responses import Response, StreamingResponse
from starlette.convertors import Convertor, register_url_convertor

from rankflow.api.boards import UsageErrorsAre400
from rankflow.api.store import Polling
from rankflow.connectors.activity_read import ActivityMoving, AsyncActivityReader, NoCount, NoSnapshot

log = logging.getLogger("rankflow.api")

router = APIRouter(route_class=UsageErrorsAre400)  # a k FastAPI cannot read is a 400 too, never a 422

TOP = 10
STREAM_MIN_INTERVAL_S = 1.0
KEEPALIVE_S = 15.0
DISCONNECT_CHECK_S = 1.0  # a gone client is noticed within this, even when nothing changes
MAX_SHARED_TOPS = 10_000
"""Stream tops kept for one snapshot (one per workspace streamed); past this they start over."""

UNAVAILABLE = (redis.RedisError, OSError, ActivityMoving)
"""What makes an activity query a ``503`` besides :class:`NoSnapshot`: Redis cannot be
reached, or a rebuild kept switching the generation during the query."""

ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "a usage error: k outside 1..K_max (the snapshot's k_max) or not an integer; "
                         "in a query form, an id missing or empty"},
    404: {"description": "the channel has no count in the snapshot's window"},
    503: {"description": "no activity snapshot published yet, or Redis cannot be reached"},
}


def k_query() -> Any:
    return Query(TOP, description="how many items, 1..K_max (the snapshot's k_max)")


class WorkspaceIdConvertor(Convertor[str]):
    """``{workspace:workspace}``: a workspace id that may hold ``/`` (docs/semantics/windows.md 1 allows any
    characters): the shortest match the rest of the route still fits, as the boards' game
    ids (``api.boards.GameIdConvertor``)."""

    regex = ".+?"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("workspace", WorkspaceIdConvertor())


def dumps(body: Any) -> bytes:
    """``body`` as JSON: orjson, or the stdlib for an integer beyond 64 bits (a watermark).

    >>> dumps({"watermark": 10**20, "id": "é"})
    b'{"watermark":100000000000000000000,"id":"\xc3\xa9"}'
    """
    try:
        return orjson.dumps(body)
    except TypeError:  # orjson.JSONEncodeError: "Integer exceeds 64-bit range"
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def activity_json(body: Any, status: int = 200) -> Response:
    return Response(dumps(body), status_code=status, media_type="application/json")


def error(status: int, message: str) -> Response:
    return activity_json({"error": message}, status)


async def ask(request: Request,
              query: Callable[[AsyncActivityReader], Awaitable[dict[str, Any]]]) -> dict[str, Any] | Response:
    """The reader's answer, or the error response its failure calls for."""
    reader: AsyncActivityReader = request.app.state.activity
    try:
        return await query(reader)
    except ValueError as exc:
        return error(400, str(exc))
    except NoCount as exc:
        return error(404, str(exc))
    except NoSnapshot as exc:
        return error(503, str(exc))
    except UNAVAILABLE as exc:
        return unreachable(exc)


async def answer(request: Request, query: Callable[[AsyncActivityReader], Awaitable[dict[str, Any]]]) -> Response:
    got = await ask(request, query)
    return got if isinstance(got, Response) else activity_json(got)


def unreachable(exc: BaseException) -> Response:
    log.warning("activity query failed: %r", exc)
    return error(503, f"cannot read the activity rankings from Redis: {exc}")


def with_lags(snapshot: dict[str, Any], now_ms: int) -> dict[str, Any]:
    """``GET /activity``: the snapshot and how far its watermark is behind now and its publication.

    >>> with_lags({"watermark": 1000, "published_at": 1500}, 4000)
    {'watermark': 1000, 'published_at': 1500, 'now': 4000, 'watermark_lag_ms': 3000, 'published_lag_ms': 500}
    """
    w = snapshot["watermark"]
    return {**snapshot, "now": now_ms, "watermark_lag_ms": None if w is None else now_ms - w,
            "published_lag_ms": None if w is None else snapshot["published_at"] - w}


# -- the routes: the global top first, so that "global" there is never taken for a workspace --

@router.get("/activity", summary="The current activity snapshot: its window, watermark and the watermark's lag",
            responses={503: ERRORS[503]})
async def current(request: Request) -> Response:
    got = await ask(request, lambda reader: reader.snapshot())
    return got if isinstance(got, Response) else activity_json(with_lags(got, int(time.time() * 1000)))


@router.get("/activity/global/top", summary="The most active channels across workspaces (docs/semantics/windows.md 4)",
            responses={k: ERRORS[k] for k in (400, 503)})
async def global_top(request: Request, k: int = k_query()) -> Response:
    return await answer(request, lambda reader: reader.global_top(k))


@router.get("/activity/top", summary="A workspace's most active channels, the workspace id in the query (any id)",
            responses={k: ERRORS[k] for k in (400, 503)})
async def top_by_query(request: Request, workspace: str = Query(..., min_length=1, description="the workspace id"),
                       k: int = k_query()) -> Response:
    return await answer(request, lambda reader: reader.top(workspace, k))


@router.get("/activity/channel", summary="One channel's count and rank in its workspace, the ids in the query",
            responses={k: ERRORS[k] for k in (400, 404, 503)})
async def channel_by_query(request: Request, workspace: str = Query(..., min_length=1, description="the workspace id"),
                           channel: str = Query(..., min_length=1, description="the channel id")) -> Response:
    return await answer(request, lambda reader: reader.channel(workspace, channel))


@router.get("/activity/stream", summary="Server-Sent Events: a workspace's top 10 when it changes (id in the query)",
            response_class=StreamingResponse, responses={k: ERRORS[k] for k in (400, 503)})
async def stream_by_query(request: Request, workspace: str = Query(..., min_length=1, description="the workspace id")) -> Response:
    return await start_stream(request, workspace)


@router.get("/activity/{workspace:workspace}/channels/{channel:path}",
            summary="One channel's count and rank in its workspace",
            responses={k: ERRORS[k] for k in (404, 503)})
async def channel(request: Request, workspace: str, channel: str) -> Response:
    return await answer(request, lambda reader: reader.channel(workspace, channel))


@router.get("/activity/{workspace:workspace}/top", summary="A workspace's most active channels (docs/semantics/windows.md 4)",
            responses={k: ERRORS[k] for k in (400, 503)})
async def top(request: Request, workspace: str, k: int = k_query()) -> Response:
    return await answer(request, lambda reader: reader.top(workspace, k))


@router.get("/activity/{workspace:workspace}/stream",
            summary="Server-Sent Events: a workspace's top 10 when it changes",
            response_class=StreamingResponse, responses={503: ERRORS[503]})
async def stream(request: Request, workspace: str) -> Response:
    return await start_stream(request, workspace)


# -- the streams ------------------------------------------------------------------------------

Version = tuple[int, int]
"""The activity generation and snapshot id: a new one may change any workspace."""


class ActivityWatch(Polling):
    """Notices new activity snapshots for the whole process, polling once for all (one
    script call that sends the snapshot document only when its id moved)."""

    name = "activity watcher"

    def __init__(self, reader: AsyncActivityReader, poll_ms: int) -> None:
        super().__init__()
        self.reader = reader
        self.poll_s = poll_ms / 1000
        self.version: Version | None = None  # None: nothing published, not read yet, or Redis unreachable
        self.snapshot: dict[str, Any] | None = None  # the reader's snapshot() at ``version``
        self.problem: str | None = "not read yet"

    def start(self) -> None:
        self._start_polling()

    async def stop(self) -> None:
        await self._stop_polling()

    async def _poll(self) -> None:
        while not self._stopping:
            try:
                await self.refresh()
            except Exception as exc:  # noqa: BLE001 - the watcher must outlive one bad read
                log.exception("activity watch")
                self._lost(f"cannot follow the activity snapshots: {exc!r}")
            await asyncio.sleep(self.poll_s)

    async def refresh(self) -> None:
        try:
            snapshot = await self.reader.snapshot()
        except NoSnapshot as exc:
            self.snapshot = None
            self._lost(str(exc))
            return
        except UNAVAILABLE as exc:
            self._lost(f"cannot reach Redis: {exc}")
            return
        version = (self.reader.held.generation, snapshot["snapshot_id"])
        self.snapshot, self.problem = snapshot, None
        if version != self.version:
            self.version = version
            self._announce_change()

    def _lost(self, problem: str) -> None:
        """Nothing cached is known to be current: the streams' reads go to Redis."""
        self.version, self.problem = None, problem


class SharedTops:
    """Each streamed workspace's top of the watcher's current snapshot, read once and shared
    by its subscribers (as ``api.board_watch.TopCache`` does for the boards)."""

    def __init__(self, reader: AsyncActivityReader, watch: ActivityWatch) -> None:
        self.reader = reader
        self.watch = watch
        self._version: Version | None = None
        self._reads: dict[tuple[str, int], asyncio.Future[dict[str, Any]]] = {}

    async def top(self, workspace: str, k: int) -> dict[str, Any]:
        version = self.watch.version
        if version is None:
            return await self.reader.top(workspace, k)
        if version != self._version or len(self._reads) >= MAX_SHARED_TOPS:
            self._version, self._reads = version, {}
        key = (workspace, k)
        read = self._reads.get(key)
        if read is None:
            read = self._reads[key] = asyncio.ensure_future(self.reader.top(workspace, k))
            read.add_done_callback(self._forget_failure(key))
        return await asyncio.shield(read)  # a subscriber that leaves must not cancel the others' read

    def _forget_failure(self, key: tuple[str, int]) -> Any:
        """Only answers are kept: a failed read is asked again."""
        def done(read: asyncio.Future[dict[str, Any]]) -> None:
            if read.cancelled() or read.exception() is not None:  # retrieved: never "never retrieved"
                if self._reads.get(key) is read:
                    del self._reads[key]
        return done


def activity_message(top: dict[str, Any]) -> bytes:
    return b"event: activity\nid: %d\ndata: %s\n\n" % (top["snapshot_id"], dumps(top))


async def activity_events(request: Request, workspace: str, k: int, first: dict[str, Any],
                          seen: Version | None) -> AsyncIterator[bytes]:
    """``first`` is the top read at ``seen``, the watcher's version before the read."""
    watch: ActivityWatch = request.app.state.activity_watch
    tops: SharedTops = request.app.state.activity_tops
    stopping = request.app.state.stopping
    yield activity_message(first)
    sent, sent_at, quiet_since = first["items"], time.monotonic(), time.monotonic()
    while not stopping.is_set() and not await request.is_disconnected():
        if watch.version != seen:
            wait = sent_at + STREAM_MIN_INTERVAL_S - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)  # coalesce: read the newest after it
            seen = watch.version
            if seen is None:
                continue  # nothing readable now (Redis down, or its data lost): wait for a snapshot
            try:
                top = await tops.top(workspace, k)
            except (NoSnapshot, ValueError, *UNAVAILABLE) as exc:  # ValueError: a new run's smaller K_max
                log.warning("activity stream %r: %r", workspace, exc)
                continue  # the next snapshot tries again
            if top["items"] != sent:
                yield activity_message(top)
                sent, sent_at = top["items"], time.monotonic()
            continue
        if await watch.wait_for_change(DISCONNECT_CHECK_S):
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= KEEPALIVE_S:
            yield b": keepalive\n\n"
            quiet_since = time.monotonic()


async def start_stream(request: Request, workspace: str) -> Response:
    seen = request.app.state.activity_watch.version
    tops: SharedTops = request.app.state.activity_tops

    async def first_top(reader: AsyncActivityReader) -> dict[str, Any]:
        snapshot = await reader.snapshot()
        k = min(TOP, snapshot["k_max"])
        return {"k": k, "top": await tops.top(workspace, k)}

    got = await ask(request, first_top)
    if isinstance(got, Response):
        return got
    return StreamingResponse(activity_events(request, workspace, got["k"], got["top"], seen),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
