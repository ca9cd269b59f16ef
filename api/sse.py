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
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Protocol

from fastapi import Request
from fastapi.responses import StreamingResponse

from rankflow.api.watch import Changes

STREAM_MIN_INTERVAL_S = 1.0
KEEPALIVE_S = 15.0
DISCONNECT_CHECK_S = 1.0  # a gone client is noticed within this, even when nothing changes
KEEPALIVE = b": keepalive\n\n"


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
