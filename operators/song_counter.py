"""The counter stage: song partitions holding counts and their local ranking.

Contract (``stateful_batch`` keyed by song partition ``"0"`` .. ``"P-1"``):

* **Input**: :data:`SongDelta` tuples ``(epoch, song_id, delta, user_delta)`` from
  the user stage, and barrier ticks ``(epoch, None, 0, 0)`` from every source batch.
  Bytewax hands a key all items of epoch ``e`` before any item of epoch ``e+1``,
  so the first item of a newer epoch proves epoch ``e`` is complete here.
* **State**: a :class:`state.ranking_index.SongIndex` (count map + balanced-tree
  index), the changes of the open epoch netted per song, and the running sum of
  ``user_delta`` (this partition's share of counted users).
* **Output**: when epoch ``e`` closes (a later item, or end of input), one
  :class:`operators.merger.PartitionReport`: the local top ``K_max``, the
  partition's listener total and user tally, and any count that went negative.
  Changes are applied once per song per epoch, which also makes a switch's -1 and
  +1 land in the same report, never in two.

Songs are assigned to partitions by CRC-32 of their UTF-8 bytes: stable across
processes, runs and Python versions (unlike ``hash()``).
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable
from typing import NamedTuple

from bytewax.operators import StatefulBatchLogic

from operators.merger import PartitionReport
from state.ranking_index import SongIndex

SongDelta = tuple[int, str | None, int, int]
"""``(epoch, song_id, delta, user_delta)``; ``song_id`` is None for a barrier tick."""


def tick(epoch: int) -> SongDelta:
    return (epoch, None, 0, 0)


def partition_key(song_id: str, partitions: int) -> str:
    """The song partition that owns ``song_id``."""
    return str(zlib.crc32(song_id.encode()) % partitions)


class CounterState(NamedTuple):
    """Recovery state of one song partition."""

    counts: dict[str, int]
    pending: dict[str, int]
    counted_users: int
    open_epoch: int | None
    last_closed: int


class SongCounterLogic(StatefulBatchLogic[SongDelta, PartitionReport, CounterState | None]):
    def __init__(self, k_max: int, resume: CounterState | None, recoverable: bool) -> None:
        self.k_max = k_max
        self.recoverable = recoverable
        if resume is None:
            resume = CounterState({}, {}, 0, None, 0)
        self.index = SongIndex(resume.counts)
        self.pending = dict(resume.pending)
        self.counted_users = resume.counted_users
        self.open_epoch = resume.open_epoch
        self.last_closed = resume.last_closed

    @classmethod
    def builder(
        cls, k_max: int, recoverable: bool
    ) -> Callable[[CounterState | None], "SongCounterLogic"]:
        return lambda resume: cls(k_max, resume, recoverable)

    def on_batch(self, items: list[SongDelta]) -> tuple[list[PartitionReport], bool]:
        out: list[PartitionReport] = []
        pending = self.pending
        for epoch, song, delta, user_delta in items:
            if epoch != self.open_epoch:
                self._open(epoch, out)
                pending = self.pending
            if song is not None:
                pending[song] = pending.get(song, 0) + delta
                self.counted_users += user_delta
        return out, StatefulBatchLogic.RETAIN

    def on_eof(self) -> tuple[list[PartitionReport], bool]:
        out: list[PartitionReport] = []
        if self.open_epoch is not None:
            out.append(self._close())
        return out, StatefulBatchLogic.RETAIN

    def _open(self, epoch: int, out: list[PartitionReport]) -> None:
        if self.open_epoch is not None:
            if epoch < self.open_epoch:
                raise AssertionError(f"epoch {epoch} arrived after epoch {self.open_epoch}")
            out.append(self._close())
        if epoch <= self.last_closed:
            raise AssertionError(f"epoch {epoch} arrived after it was closed")
        self.open_epoch = epoch

    def _close(self) -> PartitionReport:
        assert self.open_epoch is not None
        negative = self.index.apply(self.pending.items())
        self.pending = {}
        report = PartitionReport(
            epoch=self.open_epoch,
            top=self.index.top(self.k_max),
            total=self.index.total,
            counted_users=self.counted_users,
            active_songs=self.index.active_songs,
            negative=negative,
            closed_at=time.time(),
        )
        self.last_closed, self.open_epoch = self.open_epoch, None
        return report

    def snapshot(self) -> CounterState | None:
        # Bytewax calls this every epoch for every partition, recovery or not; the
        # copy is O(songs), so it is made only when someone will read it.
        if not self.recoverable:
            return None
        return CounterState(
            self.index.counts(), dict(self.pending), self.counted_users, self.open_epoch, self.last_closed
        )
