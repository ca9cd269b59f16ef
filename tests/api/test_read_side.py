"""The read side's shared pieces on their own (no Redis): the poll loop (``api.watch``),
the change-stream chain (``api.change_feed``), the shared reads (``api.shared_cache``)
and the stream loop (``api.sse``). The API tests cover them through every product."""

from __future__ import annotations

import asyncio
import doctest
import threading
from collections.abc import Hashable
from types import SimpleNamespace
from typing import Any

import pytest

from rankflow.api import change_feed, sse
from rankflow.api.change_feed import FeedGap, chain_end
from rankflow.api.shared_cache import SharedTops
from rankflow.api.watch import Polling, VersionWatch
from tests.snapshot_stamp import ageless


def test_change_feed_examples():
    result = doctest.testmod(change_feed)
    assert result.attempted > 0 and result.failed == 0


def entry(kind: bytes, previous: bytes, sid: bytes) -> dict[bytes, bytes]:
    return {b"full": kind, b"previous": previous, b"snapshot_id": sid}


def test_a_chain_breaks_at_a_gap_and_at_a_full_entry_that_carries_nothing():
    chain = [entry(b"delta", b"1", b"2"), entry(b"delta", b"2", b"3")]
    assert chain_end(b"1", chain) == b"3"
    with pytest.raises(FeedGap, match="the changes after snapshot 2 left the stream"):
        chain_end(b"1", [chain[0], entry(b"delta", b"9", b"10")])
    with pytest.raises(FeedGap, match=r"snapshot 3 is not in the stream \(large\)"):
        chain_end(b"1", [chain[0], entry(b"large", b"2", b"3")])
    with pytest.raises(FeedGap, match=r"\(full\)"):
        chain_end(b"1", [entry(b"full", b"", b"5")])
    assert chain_end(b"1", [entry(b"full", b"", b"5"), entry(b"delta", b"5", b"6")], full_starts_over=True) == b"6"


class Script(Polling):
    """A poller whose polls follow a script: an exception to raise, or None."""

    def __init__(self, steps: list[Exception | None], again_at_once: bool) -> None:
        super().__init__(poll_ms=60_000)
        self.steps, self.again_at_once, self.polls = steps, again_at_once, 0
        self.done = asyncio.Event()

    async def poll_once(self) -> None:
        self.polls += 1
        step = self.steps.pop(0) if self.steps else None
        if not self.steps:
            self.done.set()
        if step is not None:
            raise step

    def poll_failed(self, exc: Exception) -> bool:
        if isinstance(exc, KeyError):
            raise exc
        return self.again_at_once


def test_the_poll_loop_polls_again_at_once_only_when_told():
    async def scenario() -> None:
        at_once = Script([ValueError(), ValueError(), None], again_at_once=True)
        at_once.start()
        await asyncio.wait_for(at_once.done.wait(), 5)  # the interval is a minute: no wait in between
        await at_once.stop()
        assert at_once.polls == 3

        waits = Script([ValueError(), None], again_at_once=False)
        waits.start()
        await asyncio.sleep(0.05)
        assert waits.polls == 1, "a failure it outlives waits the interval"
        await waits.stop()

        fatal = Script([KeyError("x"), None], again_at_once=True)
        fatal.start()
        await asyncio.sleep(0.05)
        assert fatal._task is not None and fatal._task.done() and isinstance(fatal._task.exception(), KeyError)
        assert fatal.polls == 1, "what poll_failed re-raises ends the loop"

        first = Script([None], again_at_once=True)
        first.wait_first = True
        first.start()
        await asyncio.sleep(0.05)
        assert first.polls == 0, "a reader that read at start waits an interval first"
        await first.stop()

    asyncio.run(scenario())


class Versions(VersionWatch):
    def __init__(self, versions: list[Hashable | None]) -> None:
        super().__init__(poll_ms=60_000)
        self.versions = versions

    async def read_version(self) -> Hashable | None:
        return self.versions.pop(0)


def test_a_version_watch_announces_each_new_version_and_never_none():
    async def scenario() -> None:
        watch = Versions([(0, b"1"), (0, b"1"), None, (1, b"1"), (1, b"2")])
        announced = []
        for _ in range(5):
            waiting = asyncio.ensure_future(watch.wait_for_change(0.05))
            await asyncio.sleep(0)
            await watch.poll_once()
            announced.append((watch.version, await waiting))
        assert announced == [((0, b"1"), True), ((0, b"1"), False), (None, False), ((1, b"1"), True),
                             ((1, b"2"), True)]
        watch.lost("cannot reach Redis")
        assert (watch.version, watch.problem) == (None, "cannot reach Redis")

    asyncio.run(scenario())


class Reader:
    def __init__(self) -> None:
        self.reads: list[tuple[Any, ...]] = []
        self.release = asyncio.Event()
        self.fail = False

    async def top(self, *query: Any) -> dict[str, Any]:
        self.reads.append(query)
        await self.release.wait()
        if self.fail:
            raise LookupError("no such board")
        return {"query": query, "read": len(self.reads)}


def test_shared_tops_read_once_per_query_and_version_and_keep_only_answers():
    async def scenario() -> None:
        reader, watch = Reader(), SimpleNamespace(version=None)
        tops = SharedTops(reader, watch, limit=3)  # type: ignore[arg-type]
        reader.release.set()
        await tops.top("g", "all", 10)
        await tops.top("g", "all", 10)
        assert len(reader.reads) == 2, "no version known: every request reads"

        watch.version, reader.reads = (0, b"1"), []
        reader.release.clear()
        waiting = [asyncio.ensure_future(tops.top("g", "all", 10)) for _ in range(3)]
        await asyncio.sleep(0)
        waiting[0].cancel()  # a request that leaves does not cancel the others' read
        reader.release.set()
        answers = await asyncio.gather(*waiting[1:])
        assert reader.reads == [("g", "all", 10)] and answers[0] == answers[1]

        reader.fail = True
        with pytest.raises(LookupError):
            await tops.top("g", "daily", 10)
        reader.fail = False
        assert (await tops.top("g", "daily", 10))["read"] == 3, "a failed read is asked again"
        await tops.top("g", "best", 10)  # the third answer kept: the next new query starts over
        await tops.top("g", "all", 10)
        assert reader.reads[-1] == ("g", "all", 10) and len(reader.reads) == 5

        watch.version = (0, b"2")
        await tops.top("g", "all", 10)
        assert len(reader.reads) == 6, "a new version reads again"

    asyncio.run(scenario())


def test_shared_tops_at_hand_encode_a_new_versions_first_answer_without_a_read():
    """With the answers at hand in process (the boards' mirror), :meth:`SharedTops.ready` encodes a
    new version's first request of a query itself, once, and later requests share it; without
    them, or while they have none, it leaves the request to the slower path (None)."""
    async def scenario() -> None:
        reader, watch = Reader(), SimpleNamespace(version=(0, b"1"))
        asked: list[tuple[Any, ...]] = []

        def at_hand(*query: Any) -> dict[str, Any] | None:
            asked.append(query)
            return None if query[1] == "gone" else {"snapshot_id": int(watch.version[1]), "published_at": 1000,
                                                   "age_ms": 3}

        plain = SharedTops(reader, watch, stale_after_ms=10**13)  # type: ignore[arg-type]
        assert plain.ready("g", "all", 10) is None, "nothing read yet: the ASGI path reads it"
        tops = SharedTops(reader, watch, stale_after_ms=10**13, at_hand=at_hand)  # type: ignore[arg-type]
        first = tops.ready("g", "all", 10)
        assert first is not None and b'"stale":false' in first and tops.ready("g", "all", 10) is not None
        assert asked == [("g", "all", 10)], "encoded once per query and version"
        assert tops.ready("g", "gone", 10) is None
        watch.version = (0, b"2")
        assert (tops.ready("g", "all", 10) or b"").startswith(b'{"snapshot_id":2,')
        assert asked[-1] == ("g", "all", 10) and len(asked) == 3
        assert ageless(await tops.top_bytes("g", "all", 10)) == ageless(tops.ready("g", "all", 10))
        assert reader.reads == [], "the ASGI path shares the encoding made"

    asyncio.run(scenario())


class Request:
    """What ``api.sse.events`` uses of a request: the server's stop flag and the client's presence."""

    def __init__(self) -> None:
        self.app = SimpleNamespace(state=SimpleNamespace(stopping=threading.Event()))
        self.gone = False

    async def is_disconnected(self) -> bool:
        return self.gone


class Counter(Polling):
    """A watcher whose version the test moves."""

    def __init__(self) -> None:
        super().__init__()
        self.version = 0

    def move(self) -> None:
        self.version += 1
        self._announce_change()


class CountFeed:
    def __init__(self, watch: Counter, end_at: int) -> None:
        self.watch, self.seen, self.end_at = watch, 0, end_at

    def changed(self) -> bool:
        return self.watch.version != self.seen

    async def message(self) -> bytes | None:
        self.seen = self.watch.version
        if self.seen >= self.end_at:
            raise sse.StreamEnds(b"gone %d" % self.seen)
        return None if self.seen % 2 else b"at %d" % self.seen  # odd versions change nothing seen


def test_the_stream_loop_sends_changes_coalesces_and_ends(monkeypatch):
    monkeypatch.setattr(sse, "STREAM_MIN_INTERVAL_S", 0.2)

    async def scenario() -> None:
        watch, request = Counter(), Request()
        stream = sse.events(request, watch, CountFeed(watch, end_at=6), first=b"first")  # type: ignore[arg-type]
        assert await anext(stream) == b"first"
        watch.move()
        watch.move()  # two moves before the interval is over: one message, of the newest
        assert await anext(stream) == b"at 2"
        watch.move()  # 3 changes nothing seen: no message, the stream waits for the next change
        asyncio.get_running_loop().call_later(0.3, watch.move)
        assert await anext(stream) == b"at 4"
        watch.move()
        watch.move()
        assert await anext(stream) == b"gone 6"
        with pytest.raises(StopAsyncIteration):
            await anext(stream)

        request.app.state.stopping.set()
        stopped = sse.events(request, watch, CountFeed(watch, end_at=99))  # type: ignore[arg-type]
        with pytest.raises(StopAsyncIteration):
            await anext(stopped)

    asyncio.run(scenario())
