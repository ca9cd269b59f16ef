"""The engine's own types: what travels between the stages of every flow.

Every flow has the same spine, ``parse -> (keyed stage) -> routing -> counters ->
merger -> publish``, and these are the items that cross it whatever the product:

* :class:`Tick`, the barrier tick: every source batch sends one to every counter
  partition (that has no product batch for it), so that each partition closes epoch
  ``e`` when its first item of a later epoch arrives (``operators.counter``);
* :class:`PartitionBatch`, what every item a counter partition gets is: one item per
  partition per call of a router, whose first field is its ``epoch``. The products'
  batches (``operators.routing.SongBatch`` and ``BoardBatch``,
  ``operators.window_counter.WindowBatch``) and :class:`Tick` are all of this shape;
* :class:`SourceMark`, what a source batch tells the watermark (its greatest ``ts``,
  whether its partition is quiet), carried by the batches of the flows that keep one;
* :class:`PositionReport`, how far a source partition has been read in an epoch, and
  :class:`Tally`, counts a stage reports for an epoch: both for the merger, keyed
  :data:`MERGER_KEY`, the merger's one key.

They live here, below every stage, so that no stage imports a stage downstream of it
to name what it sends (``tests/test_import_direction.py`` holds the order).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from rankflow.state.window_rules import SourceMark

__all__ = ["MERGER_KEY", "PartitionBatch", "PositionReport", "SourceMark", "Tally", "Tick"]

# SourceMark stays defined in state.window_rules (the watermark's rules use it, and recovery
# state pickled by earlier runs names it there); the engine names it from here.

MERGER_KEY = "merger"
"""The merger's one key: every item for it (reports, positions, dead letters, tallies) carries it."""


class PartitionBatch(Protocol):
    """An item for one counter partition: its epoch (the barrier it belongs to) and what the
    product sends (nothing, for a :class:`Tick`). Bytewax hands a partition every item of epoch
    ``e`` before any item of ``e + 1``."""

    @property
    def epoch(self) -> int: ...


class Tick(NamedTuple):
    """A barrier tick: epoch ``epoch`` has items in flight from some source batch, and a
    partition with no other item of it learns that way when it is over."""

    epoch: int


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
