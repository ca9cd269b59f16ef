"""From raw source batches to user events, barrier ticks and position reports.

Stateless steps that run on the worker of the source partition, once per batch:

* :func:`stamp_epoch` is the ``inspect_debug`` inspector that writes the Bytewax
  epoch onto each batch. Every later item carries that epoch, which is how the
  keyed stages tell one barrier from the next (Bytewax keeps epochs from Python
  code everywhere else; ``inspect_debug`` is the one operator that is told the
  epoch, see :func:`stamp_epoch` for why writing it there is safe).
* :func:`parse_batch` validates every record once (docs/semantics/listeners.md section 1).
* :meth:`ParsedBatch.barrier_ticks` and :meth:`ParsedBatch.position_report` feed the
  barrier protocol: every counter partition gets a tick for every batch, and the merger
  learns how far each source partition has been read. Where the ticks must carry the
  batch's watermark mark (:meth:`ParsedBatch.source_mark`), the product's router makes
  them (the listener flow's recent plays: ``operators.routing.song_ticks``).
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Any

from rankflow.connectors.source_batch import SourceBatch
from rankflow.operators.engine_types import MERGER_KEY, PositionReport, SourceMark, Tick
from rankflow.operators.metrics import METRICS
from rankflow.state.events import INVALID_JSON, DeadLetter, parse_records

TS_FIELD = 5
"""Where a playback event (``state.events.Event``) keeps its ``ts``."""


def stamp_epoch(step_id: str, batch: SourceBatch, epoch: int, worker: int) -> None:
    """``inspect_debug`` inspector: remember which epoch (barrier interval) a batch is in.

    An inspector is meant to look, not to write; writing is safe here because of how
    Bytewax 0.21 runs it (``src/operators.rs``, ``InspectDebugOp``): the operator takes
    an epoch's items from its input (a ``Pipeline``: same worker, no copy), calls the
    inspector on each, and only then gives the same objects downstream. The step
    sits right after the input, so each batch is a fresh object that nothing else
    references yet. :class:`ParsedBatch` refuses a batch without its epoch, so a
    Bytewax that stopped calling inspectors first would fail loudly, not miscount.
    """
    batch.epoch = epoch
    batch.worker = worker  # where a stage keyed by input partition keeps it (``operators.keyed_shards``)


Parser = Callable[[list[bytes], "range | list[int]", str, int], tuple[list[Any], list[tuple[str, DeadLetter]]]]
"""``(records, offsets, partition, epoch) -> (events, [(partition, dead letter)])``: a
flow's validation (``state.events.parse_records`` for playback events,
``state.score_events.parse_score_records`` for match results)."""


class ParsedBatch:
    """A source batch split into valid events and dead letters."""

    __slots__ = ("epoch", "worker", "partition", "start", "end", "read_at", "quiet_s", "events", "dead_letters")

    def __init__(self, batch: SourceBatch, parse: Parser = parse_records) -> None:
        if not batch.epoch:
            raise RuntimeError(f"{batch!r} reached the parser without its epoch: stamp_epoch must run first")
        self.epoch = batch.epoch
        self.worker = batch.worker
        self.partition = batch.partition
        self.start = batch.start
        self.end = batch.end
        self.read_at = batch.read_at
        self.quiet_s = batch.quiet_s
        self.events, self.dead_letters = parse(batch.records, batch.offsets(), batch.partition, batch.epoch)
        if batch.refused:
            self.dead_letters += [(batch.partition, DeadLetter(INVALID_JSON, detail, batch.partition, offset, raw,
                                                               batch.epoch)) for offset, detail, raw in batch.refused]
        METRICS.input_records[batch.partition] += len(batch.records) + len(batch.refused)
        for _, dead in self.dead_letters:
            METRICS.dead_letters[dead.reason] += 1

    def keyed_dead_letters(self) -> list[tuple[str, DeadLetter]]:
        return self.dead_letters

    def barrier_ticks(self, partitions: int) -> list[tuple[str, Tick]]:
        """One tick per counter partition, so each can close the previous epoch."""
        t = Tick(self.epoch)
        return [(str(p), t) for p in range(partitions)]

    def source_mark(self, quiet_after_s: float | None) -> SourceMark:
        """What the batch tells the watermark (docs/semantics/windows.md 2): the greatest ``ts`` of its valid
        events (None without any), and whether its partition has had nothing to read for
        ``quiet_after_s`` (a live run; None: never, as with ``--until-eof``). For playback
        events (``ts`` at :data:`TS_FIELD`)."""
        events = self.events
        max_ts = max(map(itemgetter(TS_FIELD), events)) if events else None
        quiet = quiet_after_s is not None and self.quiet_s >= quiet_after_s
        return SourceMark(self.partition, self.start, max_ts, quiet)

    def position_report(self) -> tuple[str, PositionReport]:
        return MERGER_KEY, PositionReport(self.epoch, self.partition, self.end, self.read_at)


def parse_batch(batch: SourceBatch) -> ParsedBatch:
    return ParsedBatch(batch)
