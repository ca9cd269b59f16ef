"""What every rankflow source emits, and the one rule that makes barriers work.

A source partition emits :class:`SourceBatch` items: a run of raw records plus the
position after them. One Bytewax item per batch keeps the per-item cost of the
runtime off the hot path; parsing happens per batch downstream.

The barrier rule: **every source partition emits at least one batch in every
epoch, even when it has no data.** Downstream stages learn that epoch ``e`` is
complete only when they see an item of a later epoch (Bytewax never tells Python
code that an epoch closed), so an idle partition must still send an empty batch,
which the flow turns into barrier ticks for every song partition. Bytewax calls a
partition's ``snapshot()`` exactly once at the end of each epoch, right after the
epoch's last ``next_batch()``; :class:`BarrierPartition` uses that call to know
that the next batch opens a new epoch.
"""

from __future__ import annotations

import threading
import time
from abc import abstractmethod
from collections.abc import Sequence
from datetime import datetime, timedelta, UTC
from typing import ClassVar, Generic, TypeVar

from bytewax.inputs import StatefulSourcePartition

S = TypeVar("S")

IDLE_POLL = timedelta(milliseconds=20)

STOP = threading.Event()
"""Set to end every source of this process at its next read: a graceful stop (Ctrl-C).
The flow then closes its last barrier, publishes and flushes as at the end of input."""

ENDS: dict[str, int] = {}
"""Source partition -> the position where it reached the end of its input (``--until-eof``).

A partition stopped by :data:`STOP` or by an error has no entry: that is how a
rebuild tells a replay that reached the end it saw at start from one that was cut
short, which ends the flow in the same way. Cleared by the runner at every start."""


class PositionOutOfRange(RuntimeError):
    """A position the run must read from is not in its input.

    Never skipped over (Kafka's default ``auto.offset.reset=latest`` would jump to
    the end and lose history without a word): either the recovery state belongs to
    another incarnation of the input (a re-created topic, a replaced file), or
    retention deleted events a replay needs.
    """


class InputChanged(PositionOutOfRange):
    """The input is no longer what the run read: a followed file truncated, replaced or removed.

    Raised by a partition's :meth:`~BarrierPartition.read`, it does not leave the source:
    an exception out of a source panics in Bytewax's runtime (a Rust backtrace on stderr).
    The partition ends instead and stops the run as a graceful stop does (:data:`STOP`: the
    last barrier of what was read is published, nothing after the change is counted), and
    the run then fails with this error (:data:`FAILED`, raised by ``execution.execute``).
    """


FAILED: list[InputChanged] = []
"""The :class:`InputChanged` errors that ended partitions of this execution, cleared at every start."""


class SourceBatch:
    """Raw records ``[start, end)`` of one source partition.

    ``epoch`` and ``worker`` (the Bytewax worker that read it) are filled in by the flow's
    epoch-stamping step right after the input (see ``operators.parse.stamp_epoch``); sources
    leave them at 0. ``read_at`` (Unix
    seconds) is when the records were read: snapshots report how far behind it
    each song partition was. ``refused`` are records the source could not read at all, as
    ``(offset, detail, raw)``: a JSON Lines line over ``--max-line-bytes``, which the parser
    dead-letters as ``invalid_json``; their offsets are among ``[start, end)`` but not in
    :meth:`offsets`.
    """

    __slots__ = ("partition", "start", "end", "records", "record_offsets", "epoch", "worker", "read_at", "quiet_s",
                 "refused")

    def __init__(
        self,
        partition: str,
        start: int,
        end: int,
        records: list[bytes],
        record_offsets: list[int] | None = None,
    ) -> None:
        self.partition = partition
        self.start = start
        self.end = end
        self.records = records
        self.record_offsets = record_offsets
        self.epoch = 0
        self.worker = 0  # the Bytewax worker that read it (stamped with the epoch)
        self.read_at = time.time()
        self.quiet_s = 0.0  # how long the partition has had no records (set by BarrierPartition; 0 with records)
        self.refused: Sequence[tuple[int, str, bytes]] = ()

    def offsets(self) -> range | list[int]:
        """Offset of each record: contiguous unless the source gave them (Kafka gaps)."""
        if self.record_offsets is not None:
            return self.record_offsets
        return range(self.start, self.start + len(self.records))

    def __repr__(self) -> str:
        return (
            f"SourceBatch({self.partition!r}, [{self.start}, {self.end}), "
            f"{len(self.records)} records, epoch={self.epoch})"
        )


BUSY_PAUSE = timedelta(milliseconds=1)
"""After a batch with records, a partition of a run with several workers reads again no sooner."""

WAIT_SHARE = 0.8
"""The share of the last barrier wait a worker's partitions sleep through before they ask again."""


class BarrierWait:
    """One worker's barriers: when its partitions' epoch last closed, and how long they sleep then.

    Why: Bytewax 0.21's input reads nothing of a new epoch until every earlier epoch has
    left the dataflow, in every process (backpressure), and it asks a partition when to wake
    only after a read: through a wait at a barrier it keeps the answers it had, and once they
    have passed it wakes the worker at once, every step (``src/inputs.rs``). A worker waiting
    for a slower process then spins a core for the whole wait. So the reads that close an
    epoch answer "not before most of the last wait": the worker parks (``step_or_park``)
    through it and spins only for the rest. Bytewax closes all of a worker's partitions in one
    activation, so they share one guess and wake together. The guess follows the waits, from
    the close to the worker's first read after it: a wait longer than the guess (the worker
    spun) sets it to :data:`WAIT_SHARE` of that wait; one no longer (the read could have come
    sooner) shrinks it by that share, so it never delays a barrier by more than a fraction of
    the waits it saw. At most twice the barrier (a wait is the slowest process's epoch worked
    through everywhere, which can take longer than the barrier), at least :data:`BUSY_PAUSE`.

    >>> w = BarrierWait(1.0, now=0.0)
    >>> w.guess_s
    0.001
    >>> _ = w.closed(1.0); w.read(1.2); round(w.guess_s, 3)   # waited 200 ms, spinning for 199
    0.16
    >>> _ = w.closed(2.2); w.read(2.361); round(w.guess_s, 4)  # woke at the guess and could read
    0.128
    >>> _ = w.closed(3.4); w.read(3.5); w.read(3.6); round(w.guess_s, 4)  # one wait per close
    0.1024
    >>> _ = w.closed(4.0); w.read(9.0); w.guess_s               # never more than twice the barrier
    2.0
    """

    __slots__ = ("barrier_s", "closed_at", "guess_s", "waiting")

    def __init__(self, barrier_s: float, now: float) -> None:
        self.barrier_s = barrier_s
        self.closed_at = now  # the first snapshot of the last close (at first: the start)
        self.waiting = False  # closed, and no partition has read since
        self.guess_s = BUSY_PAUSE.total_seconds()

    def closed(self, now: float) -> float:
        """A partition's snapshot: the time the worker's epoch closed (its first snapshot)."""
        if not self.waiting and now - self.closed_at > self.barrier_s / 2:
            self.closed_at, self.waiting = now, True
        return self.closed_at

    def read(self, now: float) -> None:
        """A partition whose epoch closed reads again: the first such read ends the wait."""
        if not self.waiting:
            return
        self.waiting = False
        floor = BUSY_PAUSE.total_seconds()
        wait_s = now - self.closed_at
        guess = wait_s * WAIT_SHARE if wait_s > self.guess_s * 1.05 + floor else self.guess_s * WAIT_SHARE
        self.guess_s = min(self.barrier_s * 2, max(floor, guess))


def pause_when_busy(workers: int, barrier_ms: int = 250) -> None:
    """With several workers (``workers``: in all processes), make every partition wait
    :data:`BUSY_PAUSE` after a batch with records before it reads again, and sleep through
    most of a barrier's wait (:class:`BarrierWait`, ``barrier_ms``: the run's interval); with
    one worker, read at once.

    Why: Bytewax 0.21's input reads nothing more until every earlier epoch has left the
    dataflow (backpressure), and while it waits it asks to be woken again at the partitions'
    ``next_awake``: None means at once (``src/inputs.rs``), so the worker steps without
    pause, a full core, for as long as it waits. With one worker the wait is its own work
    downstream, done in the same steps; with several it waits for the others (another
    process, its exchange, the merger), and the loop is CPU per event that buys nothing. A
    wake-up a millisecond later lets the worker park (``step_or_park``) in between. The
    pause does not delay a read beyond it: a batch takes longer than that downstream."""
    several = workers > 1
    BarrierPartition.busy_pause = BUSY_PAUSE if several else None
    BarrierPartition.barrier_s = barrier_ms / 1000 if several else None
    BarrierPartition._workers.clear()  # a run's own: thread ids are reused


class BarrierPartition(StatefulSourcePartition[SourceBatch, S], Generic[S]):
    """A source partition that keeps the barrier rule for its subclass.

    Subclasses implement :meth:`read`, returning a batch or ``None`` when there is
    nothing new, and :meth:`position_state`. ``idle_poll`` is how long to wait before
    asking again after ``None``.
    """

    idle_poll = IDLE_POLL
    busy_pause: timedelta | None = None
    """How long to wait before the next read after a batch with records, None: at once
    (:func:`pause_when_busy` sets it for the whole process)."""
    barrier_s: float | None = None
    """The run's barrier interval when it has several workers (:func:`pause_when_busy`), else
    None: no sleeping through barrier waits (:class:`BarrierWait`)."""
    _workers: ClassVar[dict[int, BarrierWait]] = {}
    """Worker thread -> its partitions' barriers (Bytewax builds and steps a worker's
    partitions on the worker's thread)."""

    def __init__(self) -> None:
        self._epoch_open = True  # the first call of an execution opens an epoch
        self._idle = False
        self._ended = False
        self._last_records = time.monotonic()  # when this partition last had records (docs/semantics/windows.md 2: idle time)
        self._epoch_started = self._last_records  # the open epoch's start (:meth:`snapshot`)
        self._closed = False  # the epoch closed, and this partition has not read since
        self._wait = None if self.barrier_s is None else \
            self._workers.setdefault(threading.get_ident(), BarrierWait(self.barrier_s, self._last_records))

    @abstractmethod
    def read(self) -> SourceBatch | None:
        """Return the next records, ``None`` if none are ready; raise StopIteration at the end."""

    @abstractmethod
    def empty_batch(self) -> SourceBatch:
        """A batch with no records at the current position (a pure barrier tick)."""

    @abstractmethod
    def position_state(self) -> S:
        """Resume state: where the next execution starts reading."""

    def next_batch(self) -> list[SourceBatch]:
        now = time.monotonic()
        if self._closed and self._wait is not None:
            self._wait.read(now)
            self._closed = False
        if self._ended:
            raise StopIteration
        try:
            if STOP.is_set():
                raise StopIteration
            try:
                batch = self.read()
            except StopIteration:
                here = self.empty_batch()
                ENDS[here.partition] = here.end
                raise
            except InputChanged as exc:  # not the end of the input (no ENDS): the run stops, then fails
                FAILED.append(exc)
                STOP.set()
                raise StopIteration from None
        except StopIteration:
            if not self._epoch_open:
                raise
            # Report the final position in this epoch too (an empty input still
            # gets its snapshot); end on the next call.
            self._ended = True
            batch = self.empty_batch()
        if batch is None and self._epoch_open:
            batch = self.empty_batch()
        self._idle = batch is None
        if batch is None:
            return []
        self._epoch_open = False
        now = time.monotonic()
        if batch.records:
            self._last_records = now
        else:
            batch.quiet_s = now - self._last_records
        return [batch]

    def next_awake(self) -> datetime | None:
        if self._wait is not None and (awake := self._barrier_awake(self._wait)) is not None:
            return awake
        # When idle, poll gently; a new epoch still gets its tick within IDLE_POLL.
        if self._idle:
            return datetime.now(UTC) + self.idle_poll
        pause = self.busy_pause
        return None if pause is None else datetime.now(UTC) + pause

    def _barrier_awake(self, wait: BarrierWait) -> datetime | None:
        """The answer of a read after the epoch's end, which Bytewax closes the epoch after:
        sleep for most of the wait (:class:`BarrierWait`). None: not after the end.

        Bytewax closes the epoch in the first activation after its interval, after the reads
        of the partitions due then (a busy partition is due after :data:`BUSY_PAUSE`), and
        keeps each partition's last answer through the wait. The epoch's start here is the
        worker's first snapshot of the last close (:meth:`BarrierWait.closed`), a little
        after Bytewax's own (its clock is read once, at the top of the activation), so once this
        end has passed Bytewax's has too, give or take the reads of the same activation before
        this one; a partition that answered a moment early is closed in the next activation
        (the others are due by then), without a read, and keeps its answer."""
        assert self.barrier_s is not None
        if time.monotonic() - self._epoch_started < self.barrier_s:
            return None
        sleep = timedelta(seconds=wait.guess_s)
        return datetime.now(UTC) + (max(sleep, self.idle_poll) if self._idle else sleep)

    def snapshot(self) -> S:
        self._epoch_open = True
        if self._wait is not None:
            self._closed = True
            self._epoch_started = self._wait.closed(time.monotonic())
        return self.position_state()
