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
from typing import Generic, TypeVar

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


def pause_when_busy(workers: int) -> None:
    """With several workers (``workers``: in all processes), make every partition wait
    :data:`BUSY_PAUSE` after a batch with records before it reads again; with one, read at once.

    Why: Bytewax 0.21's input reads nothing more until every earlier epoch has left the
    dataflow (backpressure), and while it waits it asks to be woken again at the partitions'
    ``next_awake``: None means at once (``src/inputs.rs``), so the worker steps without
    pause, a full core, for as long as it waits. With one worker the wait is its own work
    downstream, done in the same steps; with several it waits for the others (another
    process, its exchange, the merger), and the loop is CPU per event that buys nothing. A
    wake-up a millisecond later lets the worker park (``step_or_park``) in between. The
    pause does not delay a read beyond it: a batch takes longer than that downstream."""
    BarrierPartition.busy_pause = BUSY_PAUSE if workers > 1 else None


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

    def __init__(self) -> None:
        self._epoch_open = True  # the first call of an execution opens an epoch
        self._idle = False
        self._ended = False
        self._last_records = time.monotonic()  # when this partition last had records (docs/semantics/windows.md 2: idle time)

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
        # When idle, poll gently; a new epoch still gets its tick within IDLE_POLL.
        if self._idle:
            return datetime.now(UTC) + self.idle_poll
        pause = self.busy_pause
        return None if pause is None else datetime.now(UTC) + pause

    def snapshot(self) -> S:
        self._epoch_open = True
        return self.position_state()
