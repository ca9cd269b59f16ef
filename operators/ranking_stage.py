"""The tail every product's flow shares: partition reports -> the merger -> Redis.

Each flow (``flows.listeners``, ``flows.boards``, ``flows.activity``) ends the same
way: the counter partitions' reports, the source positions and the dead letters meet
in one keyed stream, the merger turns an epoch's P reports into one snapshot, and the
snapshots and the dead letters go to their sinks. ``rank_and_publish`` is that wiring,
written once; the flows pass what differs (the merger's product logic, extra inputs).

Why the stateful steps are not inside the composite operator: Bytewax keys recovery
state by a step's full id (``listeners.merger``), and a composite prefixes the ids of
its substeps with its own (``listeners.merger_input.positions``). The merger and the
dead-letter output (a ``FixedPartitionedSink`` that stores its file position) must
keep their ids, or existing recovery directories would not resume; so they are
added at the flow's top level by ``rank_and_publish``, and only the stateless
assembly of the merger's input is the composite ``merger_input``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import bytewax.operators as op
from bytewax.dataflow import Stream, operator
from bytewax.operators import KeyedStream
from bytewax.outputs import Sink

from rankflow.operators.engine_types import MERGER_KEY
from rankflow.operators.parse import ParsedBatch
from rankflow.state.events import DeadLetter


def _to_merger(kv: tuple[str, Any]) -> tuple[str, Any]:
    """A partition's report keyed for the merger: ``(MERGER_KEY, (partition, report))``."""
    return MERGER_KEY, kv


def _count_dead_letter(kv: tuple[str, Any]) -> tuple[str, Any]:
    """A keyed dead letter as the merger counts it: ``(MERGER_KEY, dead_letter)``."""
    return MERGER_KEY, kv[1]


@operator
def merger_input(
    step_id: str,
    reports: KeyedStream[Any],
    parsed: Stream[ParsedBatch],
    dead_letters: KeyedStream[Any],
    *extras: KeyedStream[Any],
) -> KeyedStream[Any]:
    """The merger's one input stream, every item keyed by ``MERGER_KEY``.

    Takes ``reports``, the counter partitions' ``(partition, report)`` items (one per
    partition per closed epoch); ``parsed``, the source batches, of which each gives
    its ``position_report``; ``dead_letters``, ``(key, dead letter)`` items the merger
    counts in the snapshot; and ``extras``, streams already keyed by ``MERGER_KEY``
    (the boards' verdict tallies). Emits ``(MERGER_KEY, report)``, the positions,
    ``(MERGER_KEY, dead letter)`` and the extras, each item in the epoch it came in:
    only maps and a merge, so the epochs (the barriers) of the inputs are kept, and
    the merger sees every item of epoch ``e`` before any of ``e + 1``.

    Substeps (stateless; ids prefixed by this step's): ``partition_reports``,
    ``positions``, ``dead_letter_counts``, ``merge``.
    """
    return op.merge(
        "merge",
        op.map("partition_reports", reports, _to_merger),
        op.map("positions", parsed, ParsedBatch.position_report),
        op.map("dead_letter_counts", dead_letters, _count_dead_letter),
        *extras,
    )


def rank_and_publish(
    parsed: Stream[ParsedBatch],
    reports: KeyedStream[Any],
    dead_letters: KeyedStream[Any],
    merger_logic: Callable[[Any], Any],
    snapshot_sink: Sink[tuple[str, Any]],
    dead_letter_sink: Sink[tuple[str, DeadLetter]],
    *extras: KeyedStream[Any],
    dead_letter_output: KeyedStream[Any] | None = None,
) -> None:
    """Merge the reports into snapshots and publish them; write the dead letters.

    Adds, at the flow's top level (their ids are recovery keys, see the module
    docstring): ``merger_input`` (the composite above), ``merger`` (a
    ``stateful_batch`` of ``merger_logic``, a ``MergerLogic.builder``), ``publish``
    (the snapshots to ``snapshot_sink``) and ``dead_letter_output``. ``dead_letters``
    are the ones the merger counts; ``dead_letter_output`` what the sink writes, when
    it differs (activity's ``expired`` events are counted by their partition's report,
    not here). ``extras`` as in ``merger_input``.
    """
    merged = merger_input("merger_input", reports, parsed, dead_letters, *extras)
    snapshots = op.stateful_batch("merger", merged, merger_logic)
    op.output("publish", snapshots, snapshot_sink)
    op.output("dead_letter_output", dead_letters if dead_letter_output is None else dead_letter_output,
              dead_letter_sink)
