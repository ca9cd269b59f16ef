"""Most active channels over a sliding window (docs/semantics/windows.md): the whole dataflow in one place.

===================  ================  ==============================================
step                 keyed by          what it does
===================  ================  ==============================================
input                (source part.)    one ``SourceBatch`` per batch of raw records
stamp_epoch                            the batch learns its epoch: its barrier
parse                                  one call into the kernel per batch: checks 1-3
                                       of docs/semantics/windows.md 1 once per record,
                                       and the events per partition of workspaces, each
                                       with its batch's running greatest ``ts``, summed
                                       per bucket and pair where they are on time
window_events        counter part.     every partition gets its part and the batch's
                                       mark (its greatest ``ts``, idleness)
window_counters      counter part.     the watermark from every mark; each event
                                       judged (check 4, ``expired``) and counted in
                                       its bucket; buckets join and leave the window
                                       as the watermark moves; an ordered index of
                                       the pairs; a report per closed epoch
merger               ``"merger"``      P reports of an epoch -> the watermark, the
                                       global top, the changed workspaces, positions
publish                                one atomic Redis script per snapshot: each
                                       changed workspace's sorted set
dead_letter_output                     shape errors, and ``expired`` events
===================  ================  ==============================================

The listener flow's engine, with other rules: the same parse step, counter stage,
merger and publisher (``flows/listeners.py`` explains the barriers). There is no
per-key stage before the counters: a message is counted where its workspace lives.
The counters judge an epoch's events when it closes, once every source batch's mark
is in: with one input partition each event meets exactly the watermark of the log
before it (docs/semantics/windows.md 2), and with several a watermark between the last barrier's and
this one's.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import bytewax.operators as op
from bytewax.dataflow import Dataflow
from bytewax.inputs import Source
from bytewax.operators import KeyedStream
from bytewax.outputs import Sink

from rankflow.connectors.source_batch import SourceBatch

from rankflow.operators.counter import CounterLogic
from rankflow.operators.engine_types import Tick
from rankflow.operators.merger import MergerLogic
from rankflow.operators.parse import ParsedBatch, stamp_epoch
from rankflow.operators.ranking_stage import rank_and_publish
from rankflow.operators.window_counter import (
    MessageParser, WindowBatch, WindowTable, expired_dead_letters, route_messages)
from rankflow.state.events import DeadLetter
from rankflow.operators.window_ranking import ActivityRanking
from rankflow.state.window_rules import MESSAGES, MODES


def build_flow(
    source: Source[SourceBatch],
    dead_letter_sink: Sink[tuple[str, DeadLetter]],
    snapshot_sink: Sink[tuple[str, Any]],
    *,
    partitions: int,
    k_max: int,
    run_token: int,
    bucket_ms: int = 60_000,
    window_buckets: int = 60,
    mode: str = "messages",
    idle_after_s: float | None = None,
    summary: int = 0,
    recoverable: bool = False,
    changelog: Path | None = None,
    flow_id: str = "activity",
) -> Dataflow:
    """The activity dataflow; see the module docstring for its shape.

    ``idle_after_s``: a live run leaves an input partition out of the watermark once it
    has had no records this long (docs/semantics/windows.md 2); None (``--until-eof``) never does.
    ``summary``: N > 0 ranks globally from Misra-Gries summaries of N counters (docs/semantics/windows.md 5,
    mode ``messages`` only); 0 exactly. ``changelog``: with ``recoverable``, where the
    counter partitions append their buckets' changes at every barrier (else Bytewax
    stores each partition's whole table at every barrier).
    """
    if partitions < 1 or k_max < 1 or bucket_ms < 1 or window_buckets < 1:
        raise ValueError("partitions, k_max, bucket_ms and window_buckets must be >= 1")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if summary and mode != MESSAGES:
        raise ValueError("a global summary counts messages: distinct users do not add up across buckets")
    flow = Dataflow(flow_id)
    batches = op.input("input", flow, source)
    stamped = op.inspect_debug("stamp_epoch", batches, stamp_epoch)
    parser = MessageParser(partitions, bucket_ms, window_buckets, per_event=mode != MESSAGES or summary > 0)
    parsed = op.map("parse", stamped, partial(ParsedBatch, parse=parser))

    # the counter stage takes batches and ticks; every WindowBatch is its source batch's tick here
    routed: KeyedStream[WindowBatch | Tick] = op.flat_map(
        "window_events", parsed, partial(route_messages, partitions=partitions, quiet_after_s=idle_after_s))
    reports = op.stateful_batch("window_counters", routed, CounterLogic.builder(
        lambda stored: WindowTable(bucket_ms, window_buckets, mode, k_max, stored, summary,
                                   changelog if recoverable else None), recoverable))

    dead_letters = op.flat_map("shape_dead_letters", parsed, ParsedBatch.keyed_dead_letters)
    rank_and_publish(parsed, reports, dead_letters, MergerLogic.builder(
        partitions, lambda stored: ActivityRanking(k_max, bucket_ms, window_buckets, mode, stored, summary), run_token),
        snapshot_sink, dead_letter_sink,
        dead_letter_output=op.merge("dead_letters", dead_letters, op.flat_map("expired", reports, expired_dead_letters)))
    return flow
