"""The live streams' one loop: Server-Sent Events of a product's changes.

Contract (``GET /rankings/stream``, ``GET /boards/{game}/{board}/stream``, ``GET
/activity/{workspace}/stream``): a stream sends its first message at once if it has one,
then a message whenever a new snapshot changes what its subscriber sees, at most one
every :data:`STREAM_MIN_INTERVAL_S` per subscriber, coalescing what happened in between
(the message is made after the wait, from the newest snapshot). A comment line every
:data:`KEEPALIVE_S` keeps idle connections open; a client that left is noticed within
:data:`DISCONNECT_CHECK_S` even when nothing changes, and every stream ends at once when
the server stops (``app.state.stopping``).

What changes and what its message is belongs to the product: a :class:`Feed`.
Waiting for a change costs nothing per subscriber: the process's watcher
(``api.watch.Changes``) wakes the streams when it sees a new snapshot.

Resuming (docs/http.md, "Resuming a stream"): every event's SSE ``id`` is its snapshot id,
so a client that reconnects sends the last one it got as ``Last-Event-ID``
(:func:`last_event_id`; browsers' ``EventSource`` does it by itself). A :class:`History`,
one per stream kind and process, shared by every subscriber, keeps what was sent at the
last :data:`HISTORY_SNAPSHOTS` snapshots of each stream (a reference to what the snapshot
holds anyway, not a copy); a stream that finds the client's id there sends only what
changed since (``api.stream_diff``'s diff against it, nothing if nothing changed), and a
full first event otherwise (an id too old, from another process), as to a new client.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Hashable
from typing import Any, Protocol

from fastapi import Request
from fastapi.responses import StreamingResponse

from rankflow.api.watch import Changes

STREAM_MIN_INTERVAL_S = 1.0
KEEPALIVE_S = 15.0
DISCONNECT_CHECK_S = 1.0  # a gone client is noticed within this, even when nothing changes
KEEPALIVE = b": keepalive\n\n"


HISTORY_SNAPSHOTS = 32
"""Snapshots whose sent content a :class:`History` keeps per stream: about 8 s of 250 ms barriers."""
HISTORY_STREAMS = 10_000
"""Streams (boards, workspaces...) a :class:`History` keeps at most; past this it starts over."""


class History:
    """What one kind of stream sent, per stream (``key``: a board, a workspace) and snapshot id,
    for the last :data:`HISTORY_SNAPSHOTS` snapshots it sent at: shared by all its subscribers, so
    a reconnecting client's ``Last-Event-ID`` finds what it last got (:meth:`at`).

    Snapshot ids start over after Redis lost its data: what was sent at an id before the loss
    stays what that id means here (a diff against it is still what the client holds) until a
    new run sends at the same id, which replaces it; a client that was away across a loss and
    comes back with an id the new run has just reached again gets a diff against the new
    run's content (the one case a full event would have been right)."""

    def __init__(self, snapshots: int = HISTORY_SNAPSHOTS, streams: int = HISTORY_STREAMS) -> None:
        self.snapshots, self.streams = snapshots, streams
        self._by_key: dict[Hashable, dict[int, Any]] = {}

    def record(self, key: Hashable, snapshot_id: int, sent: Any) -> None:
        entries = self._by_key.get(key)
        if entries is None:
            if len(self._by_key) >= self.streams:
                self._by_key = {}
            entries = self._by_key[key] = {}
        entries.pop(snapshot_id, None)  # the newest recorded last: the oldest go first
        entries[snapshot_id] = sent
        while len(entries) > self.snapshots:
            del entries[next(iter(entries))]

    def at(self, key: Hashable, snapshot_id: int | None) -> Any | None:
        """What was sent for ``key`` at ``snapshot_id``; None: unknown (or no id)."""
        if snapshot_id is None:
            return None
        entries = self._by_key.get(key)
        return None if entries is None else entries.get(snapshot_id)


def history(state: Any, kind: str) -> History:
    """The process's :class:`History` of the streams of ``kind`` (made at first use)."""
    histories: dict[str, History] | None = getattr(state, "stream_histories", None)
    if histories is None:
        histories = state.stream_histories = {}
    found = histories.get(kind)
    if found is None:
        found = histories[kind] = History()
    return found


def last_event_id(request: Request) -> int | None:
    """The ``Last-Event-ID`` a reconnecting client sent, when it is a snapshot id (digits); else None."""
    value = request.headers.get("last-event-id", "").strip()
    return int(value) if value.isdigit() and len(value) < 20 else None


class StreamEnds(Exception):
    """Raised by :meth:`Feed.message`: the stream ends after ``last`` (e.g. its board is gone)."""

    def __init__(self, last: bytes) -> None:
        super().__init__()
        self.last = last


class Feed(Protocol):
    """What one subscriber follows."""

    def changed(self) -> bool:
        """Whether there may be something new to send (a new snapshot since the last look)."""

    async def message(self) -> bytes | None:
        """The message of the newest snapshot, or None if it changes nothing this
        subscriber sees; :class:`StreamEnds` to end the stream."""


async def events(request: Request, watch: Changes, feed: Feed, first: bytes | None = None) -> AsyncIterator[bytes]:
    """The stream of ``feed``'s messages, ``first`` at once (if any)."""
    stopping = request.app.state.stopping
    sent_at = 0.0
    if first is not None:
        yield first
        sent_at = time.monotonic()
    quiet_since = time.monotonic()
    while not stopping.is_set() and not await request.is_disconnected():
        if feed.changed():
            wait = sent_at + STREAM_MIN_INTERVAL_S - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)  # coalesce: the message is of the newest snapshot after it
            try:
                message = await feed.message()
            except StreamEnds as end:
                yield end.last
                return
            if message is not None:
                yield message
                sent_at = time.monotonic()
            continue
        if await watch.wait_for_change(DISCONNECT_CHECK_S):
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= KEEPALIVE_S:
            yield KEEPALIVE
            quiet_since = time.monotonic()


def event_stream(request: Request, watch: Changes, feed: Feed, first: bytes | None = None) -> StreamingResponse:
    """The response of a stream route: :func:`events`, unbuffered by proxies."""
    return StreamingResponse(events(request, watch, feed, first), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
