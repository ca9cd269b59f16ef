"""The merger: one consistent snapshot per barrier, for every flow.

Contract (``stateful_batch`` with the single key :data:`MERGER_KEY`):

* **Input**, all keyed :data:`MERGER_KEY`:
  ``(partition, report)`` from every counter partition for every epoch;
  :class:`PositionReport` from every source batch; every ``DeadLetter`` (counted).
* **Completion rule**: epoch ``e`` is complete when all P partitions reported it.
  Position reports and dead letters of epoch ``e`` travel in epoch ``e``, while
  partition reports of ``e`` are emitted in a later epoch, so by then everything
  up to ``e`` has arrived here.
* **Output**: one snapshot per complete epoch, in epoch order, made by the flow's
  :class:`Combiner` from the epoch's :class:`Cut` (id, positions, dead letters) and
  the P reports. The listener flow's (:class:`SongRanking`) is a
  :class:`state.snapshot.Snapshot`: the global top ``K_max`` merged from the P local lists and the split songs
  (every partial added first, see ``operators.routing``), input positions
  (the next offset per source partition), listener and user totals, the
  invariant check ``total_listeners == counted_users``, and per song partition its
  lag (``partition_lag_ms``): how long after the newest input of the cut was read
  the partition closed the epoch, i.e. how far its counts trailed the input. A violation or a negative
  count is logged and carried in the snapshot's ``errors``; nothing is clamped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from bytewax.operators import StatefulBatchLogic

from rankflow.operators.recent_plays import combine_recent
from rankflow.state.events import DeadLetter
from rankflow.state.ranking_index import COUNT_THEN_ID_DESCENDING, merge_local_tops
from rankflow.state.snapshot import Snapshot, snapshot_id

log = logging.getLogger("rankflow.merger")

MERGER_KEY = "merger"


class PositionReport(NamedTuple):
    """Source partition ``partition`` has been read up to ``end`` (exclusive) in ``epoch``,
    by a read at ``read_at`` (Unix seconds)."""

    epoch: int
    partition: str
    end: int
    read_at: float = 0.0


class Tally(NamedTuple):
    """Counts a stage reports for ``epoch`` (e.g. ``{"duplicates": 3}``); the snapshot of the
    cut that includes ``epoch`` carries their running totals."""

    epoch: int
    counts: dict[str, int]


class PartitionReport(NamedTuple):
    """A song partition's state at the close of ``epoch``."""

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
    recent: Any = None  # ``operators.recent_plays.RecentReport``; None with recent plays off


class MergerState(NamedTuple):
    reports: dict[int, dict[str, PartitionReport]]
    pending_positions: dict[int, dict[str, int]]
    pending_dead: dict[int, int]
    positions: dict[str, int]
    dead_letters: int
    last_epoch: int
    pending_read_at: dict[int, float] = {}  # defaults: state stored before these fields resumes too
    read_at: float = 0.0
    combiner: Any = None
    pending_counts: dict[int, dict[str, int]] = {}
    counts: dict[str, int] = {}


class MergerLogic(StatefulBatchLogic[object, object, MergerState]):
    """Epoch completion, positions and dead-letter counts around a product's :class:`Combiner`."""

    def __init__(self, partitions: int, combiner: Combiner, run_token: int, resume: MergerState | None) -> None:
        self.partitions = partitions
        self.combiner = combiner
        self.run_token = run_token
        s = resume or MergerState({}, {}, {}, {}, 0, 0)
        self.reports = {e: dict(r) for e, r in s.reports.items()}
        self.pending_positions = {e: dict(p) for e, p in s.pending_positions.items()}
        self.pending_dead = dict(s.pending_dead)
        self.positions = dict(s.positions)
        self.dead_letters = s.dead_letters
        self.last_epoch = s.last_epoch
        self.pending_read_at = dict(s.pending_read_at)
        self.read_at = s.read_at  # when the newest input in the cut was read
        self.pending_counts = {e: dict(c) for e, c in s.pending_counts.items()}
        self.counts = dict(s.counts)  # running totals: tallies, and dead letters per reason

    @classmethod
    def builder(cls, partitions: int, make_combiner: Callable[[Any], Combiner], run_token: int
                ) -> Callable[[MergerState | None], MergerLogic]:
        """``make_combiner(stored combiner state or None)`` builds the product's combiner."""
        return lambda resume: cls(partitions, make_combiner(resume.combiner if resume else None), run_token, resume)

    @classmethod
    def for_songs(cls, song_partitions: int, k_max: int, run_token: int, resume: MergerState | None = None,
                  recent_minutes: int = 0) -> MergerLogic:
        """The listener flow's merger (what tests build without the runtime)."""
        return cls(song_partitions, SongRanking(k_max, recent_minutes), run_token, resume)

    def on_batch(self, items: list[object]) -> tuple[list[object], bool]:
        out: list[object] = []
        for item in items:
            if item.__class__ is PositionReport:
                self._position(item)  # type: ignore[arg-type]
            elif item.__class__ is DeadLetter:
                epoch = item.epoch  # type: ignore[attr-defined]
                self.pending_dead[epoch] = self.pending_dead.get(epoch, 0) + 1
                self._count(epoch, {f"dead_letters.{item.reason}": 1})  # type: ignore[attr-defined]
            elif item.__class__ is Tally:
                self._count(item.epoch, item.counts)  # type: ignore[attr-defined]
            else:
                part, report = item  # type: ignore[misc]
                self._partition_report(part, report, out)
        return out, StatefulBatchLogic.RETAIN

    def _count(self, epoch: int, counts: dict[str, int]) -> None:
        pending = self.pending_counts.get(epoch)
        if pending is None:
            pending = self.pending_counts[epoch] = {}
        for name, n in counts.items():
            pending[name] = pending.get(name, 0) + n

    def _position(self, report: PositionReport) -> None:
        positions = self.pending_positions.setdefault(report.epoch, {})
        if report.end > positions.get(report.partition, -1):
            positions[report.partition] = report.end
        if report.read_at > self.pending_read_at.get(report.epoch, 0.0):
            self.pending_read_at[report.epoch] = report.read_at

    def _partition_report(self, part: str, report: Any, out: list[object]) -> None:
        if report.epoch <= self.last_epoch:
            log.error("late report for epoch %s from partition %s ignored", report.epoch, part)
            return
        reports = self.reports.setdefault(report.epoch, {})
        reports[part] = report
        if len(reports) == self.partitions:
            out.append(self._complete(report.epoch))

    def _complete(self, epoch: int) -> object:
        for stale in [e for e in self.reports if e < epoch]:
            log.error("epoch %s never completed (%s of %s partitions); skipped",
                      stale, len(self.reports[stale]), self.partitions)
            del self.reports[stale]
        reports = self.reports.pop(epoch)
        self._fold_through(epoch)
        self.last_epoch = epoch
        cut = Cut(snapshot_id(self.run_token, epoch), self.run_token, epoch, dict(self.positions),
                  self.dead_letters, self.read_at, dict(self.counts))
        return self.combiner.combine(cut, reports)

    def _fold_through(self, epoch: int) -> None:
        """Move positions and dead-letter counts of epochs <= ``epoch`` into the cut."""
        for e in sorted(e for e in self.pending_positions if e <= epoch):
            for part, end in self.pending_positions.pop(e).items():
                if end > self.positions.get(part, -1):
                    self.positions[part] = end
        for e in [e for e in self.pending_dead if e <= epoch]:
            self.dead_letters += self.pending_dead.pop(e)
        for e in [e for e in self.pending_read_at if e <= epoch]:
            self.read_at = max(self.read_at, self.pending_read_at.pop(e))
        for e in [e for e in self.pending_counts if e <= epoch]:
            for name, n in self.pending_counts.pop(e).items():
                self.counts[name] = self.counts.get(name, 0) + n

    def snapshot(self) -> MergerState:
        return MergerState(
            {e: dict(r) for e, r in self.reports.items()},
            {e: dict(p) for e, p in self.pending_positions.items()},
            dict(self.pending_dead),
            dict(self.positions),
            self.dead_letters,
            self.last_epoch,
            dict(self.pending_read_at),
            self.read_at,
            self.combiner.state(),
            {e: dict(c) for e, c in self.pending_counts.items()},
            dict(self.counts),
        )


class Cut(NamedTuple):
    """What a complete epoch's snapshot names besides the product's state: its id and
    the input before it (docs/semantics/listeners.md section 5)."""

    snapshot_id: int
    run: int
    epoch: int
    positions: dict[str, int]
    dead_letters: int
    read_at: float  # when the newest input in the cut was read (Unix seconds)
    counts: dict[str, int] = {}  # running totals of tallies (``Tally``) and of dead letters per reason


class Combiner(Protocol):
    """How one product turns the P partition reports of an epoch into its snapshot."""

    def combine(self, cut: Cut, reports: dict[str, Any]) -> object:
        """The snapshot of ``cut`` from every partition's report of its epoch."""

    def state(self) -> Any:
        """What recovery stores for the combiner (None when it keeps nothing)."""


class SongRanking:
    """The listener flow's combiner: the global top ``K_max`` songs and the count changes,
    and with ``recent_minutes`` the recent plays (``operators.recent_plays``)."""

    def __init__(self, k_max: int, recent_minutes: int = 0) -> None:
        self.k_max = k_max
        self.recent_minutes = recent_minutes

    def combine(self, cut: Cut, reports: dict[str, PartitionReport]) -> Snapshot:
        full = all(r.full for r in reports.values())
        split: dict[str, int] = {}
        for r in reports.values():
            for song, count in r.partials.items():
                split[song] = split.get(song, 0) + count
        split_live = COUNT_THEN_ID_DESCENDING.sort((song, count) for song, count in split.items() if count > 0)
        counts: dict[str, int] = {}
        for r in reports.values():
            counts.update(r.changed)
        counts.update(split)  # a split song's count is the sum of its partials
        total = sum(r.total for r in reports.values())
        users = sum(r.counted_users for r in reports.values())
        errors = [f"negative count: {song} = {n} (partition {p})"
                  for p, r in sorted(reports.items()) for song, n in r.negative]
        if total != users:
            errors.append(f"invariant violated: total_listeners {total} != counted_users {users}")
        recent = None
        if self.recent_minutes:
            recent, disagree = combine_recent([r.recent for _, r in sorted(reports.items())], self.recent_minutes,
                                              self.k_max)
            errors += disagree
        for e in errors:
            log.error("epoch %s: %s", cut.epoch, e)
        return Snapshot(
            snapshot_id=cut.snapshot_id,
            run=cut.run,
            epoch=cut.epoch,
            positions=cut.positions,
            total_listeners=total,
            counted_users=users,
            active_songs=sum(r.active_songs for r in reports.values()) + len(split_live),
            dead_letters=cut.dead_letters,
            k_max=self.k_max,
            items=merge_local_tops([*(r.top for r in reports.values()), split_live], self.k_max,
                                   COUNT_THEN_ID_DESCENDING),
            split_songs=sorted(song for song, count in split.items() if count),
            counts=counts,
            counts_full=full,
            partition_lag_ms=lag_ms(cut, reports),
            errors=errors,
            recent=recent,
        )

    def state(self) -> None:
        return None


def lag_ms(cut: Cut, reports: dict[str, Any]) -> dict[str, int]:
    """Per partition, how long after the newest input of the cut was read it closed the epoch."""
    return {p: max(0, round((r.closed_at - cut.read_at) * 1000)) for p, r in sorted(reports.items())}
