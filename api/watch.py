"""The service's background readers of Redis: one poll loop, one version watcher.

Contract:

* :class:`Polling` is a reader's background task: every ``poll_s``, and at once when
  :meth:`Polling.wake` is called (a publish was announced: ``api.announce``), it calls
  :meth:`Polling.poll_once`; a failure goes to :meth:`Polling.poll_failed`, which says
  whether to poll again at once or re-raises (ending the task). :meth:`Polling.start`
  and :meth:`Polling.stop` start it and stop it in bounded time; a reader that reads
  once before starting (``wait_first``) waits one interval before its first poll.
  :meth:`Polling.wait_for_change` wakes when the reader announces a new snapshot.
* :class:`VersionWatch` is a :class:`Polling` that knows a product's version (its
  generation and snapshot id) and nothing else: it announces every new version, and
  its version is ``None`` while none is known to be current (not read yet, nothing
  published, Redis unreachable), so that what is cached per version is not used.
* :class:`Watched` is what the shared reads (``api.shared_cache``) and the event
  streams (``api.sse``) follow: a version and a change signal (:class:`Changes`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable
from typing import Any, Generic, Protocol, TypeVar

log = logging.getLogger("rankflow.api")


class Changes(Protocol):
    """What wakes the streams when a new snapshot arrives (every :class:`Polling`)."""

    async def wait_for_change(self, timeout: float) -> bool: ...


class Watched(Changes, Protocol):
    """What tells the shared reads and the streams that the snapshot changed, and which it is."""

    @property
    def version(self) -> Hashable | None: ...


V = TypeVar("V", bound=Hashable)
"""A product's snapshot version, as its :class:`VersionWatch` reads it."""


class Polling:
    """A reader's background task that polls Redis (the :meth:`_poll` loop, which ends when
    ``_stopping`` is set), started and stopped in one place.

    Cancelling alone is not enough on Python 3.11: its ``asyncio.wait_for`` (which
    redis-py uses for socket timeouts) swallows a cancellation that arrives just as the
    awaited call completes, and the poll loop would go on forever (this hung a CI run
    in the test client's shutdown). So the loop also checks a flag, and stopping never
    re-cancels: :func:`wait_bounded` only waits.
    """

    name = "poller"
    wait_first = False
    """Whether the loop waits one interval before its first poll (the reader read at start)."""

    def __init__(self, poll_ms: int = 1000) -> None:
        self.poll_s = poll_ms / 1000
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._changed = asyncio.Event()  # set, and replaced, at each new snapshot
        self._woken = asyncio.Event()  # set by :meth:`wake`: poll now, not at the interval's end

    async def poll_once(self) -> None:
        """One look at Redis."""
        raise NotImplementedError

    def poll_failed(self, exc: Exception) -> bool:
        """``exc`` ended one :meth:`poll_once`: True to poll again at once, False to wait
        the interval; re-raise what the loop must not outlive."""
        raise exc

    def wake(self) -> None:
        """Poll now: something was published (a wake during a poll makes one more poll after it)."""
        self._woken.set()

    async def _poll(self) -> None:
        wait = self.wait_first
        while not self._stopping:
            if wait:
                await self._interval()
                if self._stopping:
                    break
            self._woken.clear()  # what is published from here on is the poll's, or wakes the next one
            try:
                await self.poll_once()
                wait = True
            except Exception as exc:  # noqa: BLE001 - poll_failed says which ones the loop outlives
                wait = not self.poll_failed(exc)

    async def _interval(self) -> None:
        """Until :meth:`wake` or ``poll_s`` has passed (``asyncio.wait``: see :meth:`wait_for_change`)."""
        if self._woken.is_set():
            return
        waiter = asyncio.ensure_future(self._woken.wait())
        try:
            await asyncio.wait({waiter}, timeout=self.poll_s)
        finally:
            waiter.cancel()

    def start(self) -> None:
        self._stopping = False
        self._task = asyncio.create_task(self._poll(), name=self.name)

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            await wait_bounded(self._task, f"the {self.name} did not stop in time")

    def _announce_change(self) -> None:
        """Wake every :meth:`wait_for_change`: the snapshot served is a new one."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_for_change(self, timeout: float) -> bool:
        """True if a new snapshot arrived within ``timeout``.

        ``asyncio.wait`` rather than ``wait_for``: on Python 3.11 the latter can swallow
        the cancellation of a stream whose client left or whose server is stopping.
        """
        waiter = asyncio.ensure_future(self._changed.wait())
        try:
            done, _ = await asyncio.wait({waiter}, timeout=timeout)
        finally:
            waiter.cancel()
        return bool(done)


class VersionWatch(Polling, Generic[V]):
    """Notices a product's new snapshots for the whole process, polling once for all.

    A subclass says how to read the version (:meth:`read_version`, ``None`` when none is
    current) and which failures it outlives (:meth:`poll_failed`, after :meth:`lost`).
    """

    name = "version watcher"

    def __init__(self, poll_ms: int) -> None:
        super().__init__(poll_ms)
        self.version: V | None = None  # None: not read yet, nothing published, or Redis unreachable
        self.problem: str | None = "not read yet"

    async def read_version(self) -> V | None:
        raise NotImplementedError

    async def poll_once(self) -> None:
        self.see(await self.read_version())

    def see(self, version: V | None) -> None:
        """Take ``version`` as the current one; announce it if it is new (None is never announced)."""
        if version is None:
            self.version = None
            return
        self.problem = None
        if version != self.version:
            self.version = version
            self._announce_change()

    def lost(self, problem: str) -> None:
        """Nothing cached is known to be current: the shared reads go to Redis."""
        self.version, self.problem = None, problem


async def wait_bounded(task: asyncio.Future[Any], late: str, timeout_s: float = 5.0) -> None:
    """Wait for ``task`` at most ``timeout_s``, logging ``late`` if it is still running.
    Never re-cancels: ``asyncio.wait`` only waits (see :class:`Polling`)."""
    _, pending = await asyncio.wait({task}, timeout=timeout_s)
    if pending:
        log.warning("%s", late)
