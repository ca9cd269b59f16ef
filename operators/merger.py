"""The merger: one consistent snapshot per barrier, for every flow.

Contract (``stateful_batch`` with the single key ``operators.engine_types.MERGER_KEY``):

* **Input**, all keyed ``MERGER_KEY``:
  ``(partition, report)`` from every counter partition for every epoch;
  :class:`PositionReport` from every source batch; every ``DeadLetter`` (counted).
* **Completion rule**: epoch ``e`` is complete when all P partitions reported it.
  Position reports and dead letters of epoch ``e`` travel in epoch ``e``, while
  partition reports of ``e`` are emitted in a later epoch, so by then everything
  up to ``e`` has arrived here.
* **Output**: one snapshot per complete epoch, in epoch order, made by the flow's
  :class:`Combiner` from the epoch's :class:`Cut` (id, positions, dead letters, tallies)
  and the P reports: ``operators.song_ranking.SongRanking`` (listeners),
  ``operators.board_ranking.BoardRanking``, ``operators.window_ranking.ActivityRanking``.
  This module knows no product: what a report holds is its combiner's business.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol, cast

from bytewax.operators import StatefulBatchLogic

from rankflow.operators.engine_types import PositionReport, Tally
from rankflow.state.events import DeadLetter
from rankflow.state.snapshot import snapshot_id

log = logging.getLogger("rankflow.merger")


def __getattr__(name: str) -> Any:
    """Names recovery state pickled before the listener's report moved out of this module:
    a stored :class:`MergerState` holds the pending ``PartitionReport`` of unfinished epochs
    under this module's name, and ``pickle`` looks it up here. Imported only then."""
    if name == "PartitionReport":
        from rankflow.operators.song_counter import PartitionReport

        return PartitionReport
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class MergerState(NamedTuple):
    """Recovery state of the merger (defaults: state stored before these fields resumes too)."""

    reports: dict[int, dict[str, Any]]  # per open epoch, the reports in so far (the product's type)
    pending_positions: dict[int, dict[str, int]]
    pending_dead: dict[int, int]
    positions: dict[str, int]
    dead_letters: int
    last_epoch: int
    pending_read_at: dict[int, float] = {}
    read_at: float = 0.0
    combiner: Any = None
    pending_counts: dict[int, dict[str, int]] = {}
    counts: dict[str, int] = {}


MergerItem = PositionReport | DeadLetter | Tally | tuple[str, Any]
"""What the merger gets, all keyed ``MERGER_KEY``: a source batch's position, a dead letter
(counted), a stage's tally, or ``(partition, report)`` (the product's report)."""


class MergerLogic(StatefulBatchLogic[MergerItem, object, MergerState]):
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

    def on_batch(self, items: list[MergerItem]) -> tuple[list[object], bool]:
        out: list[object] = []
        for item in items:
            if type(item) is PositionReport:
                self._position(item)
            elif type(item) is DeadLetter:
                epoch = item.epoch
                self.pending_dead[epoch] = self.pending_dead.get(epoch, 0) + 1
                self._count(epoch, {f"dead_letters.{item.reason}": 1})
            elif type(item) is Tally:
                self._count(item.epoch, item.counts)
            else:
                part, report = cast("tuple[str, Any]", item)
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


def lag_ms(cut: Cut, reports: dict[str, Any]) -> dict[str, int]:
    """Per partition, how long after the newest input of the cut was read it closed the epoch."""
    return {p: max(0, round((r.closed_at - cut.read_at) * 1000)) for p, r in sorted(reports.items())}
