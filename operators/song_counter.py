"""The listener flow's counter table: song partitions holding counts and their local ranking.

Contract (the counter stage of ``operators.counter``, keyed by song partition ``"0"`` .. ``"P-1"``):

* **Input**: :class:`operators.routing.SongBatch` items: net deltas and split songs
  from the combine step (with recent plays also accepted starts per song and bucket),
  and barrier ticks from every source batch (the engine's ``Tick``; with recent plays
  a ``SongBatch`` with the batch's watermark mark). Bytewax hands a key all items of
  epoch ``e`` before any item of epoch ``e+1``, so the first item of a newer epoch
  proves epoch ``e`` is complete here.
* **State**: a :class:`state.ranking_index.RetractableIndex` (count map + balanced-tree
  index: counts go up and down) of the ordinary songs, the partial counters ``(song, salt)`` of split
  songs, the set of songs known to be split, the open epoch's changes netted per
  counter, the running sum of ``user_delta`` (this partition's share of counted
  users), and the last epoch applied: the identity that makes every epoch's net
  deltas count once. With recent plays also the partition's
  :class:`operators.recent_plays.RecentPlays` (the watermark, the window's buckets, and
  the open epoch's marks and accepted starts), so that it survives a restart too.
* **Output**: when epoch ``e`` closes (a later item, or end of input), one
  :class:`PartitionReport`: the local top ``K_max`` of ordinary
  songs, every partial count of split songs (summed per song; a song whose partials
  changed this epoch is listed even at 0, so the merger learns that its last
  listener left and removes it from the count table), the partition's
  listener total and user tally, any count that went negative, and the ordinary
  songs whose count changed (all of them in the first report of an execution, so
  readers' full count tables can be rebuilt from it). A switch's -1 and +1 always
  land in the same report, never in two. With recent plays on, the report also
  carries the partition's recent plays at the close (``operators.recent_plays``):
  the watermark every partition computes from the same marks, and the local top
  ``K_max`` of the songs whose accepted starts are in its window.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple

from rankflow.operators.counter import CounterLogic, CounterState
from rankflow.operators.recent_plays import RecentPlays, RecentReport
from rankflow.operators.routing import SongBatch
from rankflow.state.ranking_index import RetractableIndex

Counter = tuple[str, int]  # (song_id, salt)


class PartitionReport(NamedTuple):
    """A song partition's state at the close of ``epoch`` (what ``operators.song_ranking`` merges)."""

    epoch: int
    top: list[tuple[str, int]]
    partials: dict[str, int]  # split songs: this partition's share of each
    total: int
    counted_users: int
    active_songs: int
    negative: list[tuple[str, int]]
    changed: dict[str, int]  # ordinary songs whose count changed (every song when ``full``)
    full: bool
    closed_at: float
    recent: RecentReport | None = None  # None with recent plays off


class SongState(NamedTuple):
    """Recovery state of one song partition's table."""

    counts: dict[str, int]
    partials: dict[Counter, int]
    split: frozenset[str]
    pending: dict[Counter, int]
    counted_users: int
    recent: dict[str, Any] | None = None  # ``RecentPlays.state()``; None with recent plays off


class SongTable:
    """A song partition: ordinary counts in a :class:`RetractableIndex`, partials of split songs, and
    with ``recent_minutes`` its share of recent plays (:class:`operators.recent_plays.RecentPlays`)."""

    def __init__(self, k_max: int, resume: SongState | None = None, recent_minutes: int = 0) -> None:
        s = resume or SongState({}, {}, frozenset(), {}, 0)
        self.k_max = k_max
        self.recent = RecentPlays(recent_minutes, k_max, s.recent) if recent_minutes else None
        self.index = RetractableIndex(s.counts)
        self.partials = dict(s.partials)
        self.split = set(s.split)
        self.pending = dict(s.pending)
        self.counted_users = s.counted_users
        self.reported_all = False  # the first report of this execution carries every count
        self.moved: set[str] = set()  # songs that left the ordinary index by a split this epoch

    def stage(self, batch: SongBatch) -> None:
        """Take a batch into the open epoch: its deltas wait for the close, its split songs
        move at once, its starts and mark go to the recent plays."""
        _, deltas, split, starts, mark = batch
        if deltas:
            pending, users = self.pending, 0
            for song, salt, delta, user_delta in deltas:
                key = (song, salt)
                pending[key] = pending.get(key, 0) + delta
                users += user_delta
            self.counted_users += users
        for song in split:
            self._mark_split(song)
        if starts or mark is not None:
            recent = self.recent
            if recent is None:
                raise ValueError(f"recent plays are off, yet partition got {batch!r}")
            if starts:
                recent.add_starts(starts)
            if mark is not None:
                recent.mark(mark)

    def _mark_split(self, song: str) -> None:
        """From now on the song's ordinary count is one of its partials."""
        if song in self.split:
            return
        self.split.add(song)
        self.moved.add(song)
        count = self.index.count(song)
        if count:
            self.index.apply([(song, -count)])
            self.partials[(song, 0)] = count

    def close(self, epoch: int) -> PartitionReport:
        ordinary: list[tuple[str, int]] = []
        negative: list[tuple[str, int]] = []
        partials, split = self.partials, self.split
        touched: set[str] = set()  # split songs whose partials changed: reported even at 0
        for (song, salt), delta in self.pending.items():
            if salt == 0 and song not in split:
                ordinary.append((song, delta))
                continue
            touched.add(song)
            count = partials.get((song, salt), 0) + delta
            if count:
                partials[(song, salt)] = count
            else:
                partials.pop((song, salt), None)
            if count < 0:
                negative.append((f"{song}#{salt}", count))
        negative += self.index.apply(ordinary)
        self.pending = {}
        full = not self.reported_all
        if full:
            changed = self.index.counts()
            self.reported_all = True
        else:
            changed = {song: self.index.count(song) for song, _ in ordinary}
            changed.update((song, 0) for song in self.moved if song not in changed)
        self.moved = set()
        summed: dict[str, int] = dict.fromkeys(touched, 0)
        for (song, _), count in partials.items():
            summed[song] = summed.get(song, 0) + count
        return PartitionReport(
            epoch=epoch,
            top=self.index.top(self.k_max),
            partials=summed,
            total=self.index.total + sum(summed.values()),
            counted_users=self.counted_users,
            active_songs=len(self.index),
            negative=negative,
            changed=changed,
            full=full,
            closed_at=time.time(),
            recent=None if self.recent is None else self.recent.close(),
        )

    def state(self) -> SongState:
        return SongState(self.index.counts(), dict(self.partials), frozenset(self.split), dict(self.pending),
                         self.counted_users, None if self.recent is None else self.recent.state())


class SongCounterLogic(CounterLogic[SongBatch, PartitionReport]):
    """The counter stage with a :class:`SongTable`: one song partition."""

    def __init__(self, k_max: int, resume: CounterState | None, recoverable: bool, recent_minutes: int = 0) -> None:
        super().__init__(SongTable(k_max, resume.table if resume else None, recent_minutes), resume, recoverable)


def song_counters(k_max: int, recoverable: bool, recent_minutes: int = 0
                  ) -> Callable[[CounterState | None], SongCounterLogic]:
    """The song partitions' logic builder (``stateful_batch``'s)."""
    return lambda resume: SongCounterLogic(k_max, resume, recoverable, recent_minutes)
