"""Songs ranked by current listeners: the whole dataflow in one place.

===================  ================  ==============================================
step                 keyed by          what it does
===================  ================  ==============================================
input                (source part.)    one ``SourceBatch`` per batch of raw records
stamp_epoch                            the batch learns its epoch: its barrier
parse                                  validates each record once (docs/semantics/listeners.md 1)
user_events          source part.      a batch's events as one item, on the worker that
                     (or shard, user)  read it (``shard_workers``); or one item per user
                                       shard (or per user with ``user_shards=0``)
users                ``user_id``       the counting rules (docs/semantics/listeners.md 3): song
                     (shard or user)   changes, and conflicts for the dead letters
net_song_deltas                        sums changes per song, routes them to song
                                       partitions (and hot songs to partials); with
                                       recent plays, accepted starts per song and
                                       minute to the song's partition
barrier_ticks        song partition    one per partition per source batch (with
                                       recent plays: carrying the batch's watermark
                                       mark, its greatest ``ts``)
song_counters        song partition    counts + balanced-tree index; a report with
                                       the local top ``K_max`` per closed epoch (and
                                       the recent plays' watermark and local top)
merger               ``"merger"``      P reports of an epoch -> global top ``K_max``,
                                       positions, totals, invariant; counts dead
                                       letters; the recent plays' window and top
publish                                one atomic Redis script per snapshot
dead_letter_output                     shape errors and conflicts, with reasons
===================  ================  ==============================================

Bytewax epochs are the barriers: a keyed stage receives every item of epoch ``e``
before any item of ``e+1``, on every worker. A song partition closes epoch ``e``
when its first item of a later epoch (a tick, at least) arrives, so each published
snapshot is exactly the input before the positions it names; a user's -1 and +1
always share one epoch, so a switch is never split across snapshots.

The tail from ``merger`` on (with the stateless ``merger_input`` composite that feeds it)
is ``operators.ranking_stage.rank_and_publish``, the same in every product's flow.

Recent plays (``--recent-minutes N``, docs/semantics/windows.md 7; ``operators.recent_plays``) ride
on the same steps: the user stage's accepted starts and the ticks' watermark marks
reach the song partitions in the epoch they belong to, so the recent ranking in a
snapshot is exactly the input before its positions too. With ``N = 0`` nothing of it
is built.
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

from rankflow.operators.engine_types import Tick
from rankflow.operators.keyed_shards import BY_PARTITION, MarkingShardRouter, PartitionShardRouter, ShardItems
from rankflow.operators.parse import ParsedBatch, parse_batch, stamp_epoch
from rankflow.operators.ranking_stage import rank_and_publish
from rankflow.operators.routing import SongBatch, combine_song_deltas, song_ticks
from rankflow.operators.song_counter import song_counters
from rankflow.operators.song_ranking import song_merger
from rankflow.operators.user_stage import ShardRouter, SweeperConfig, SweepingShardLogic, UserShardLogic, select_conflicts
from rankflow.state.events import DeadLetter


def build_flow(
    source: Source[SourceBatch],
    dead_letter_sink: Sink[tuple[str, DeadLetter]],
    snapshot_sink: Sink[tuple[str, Any]],
    *,
    song_partitions: int,
    k_max: int,
    run_token: int,
    user_shards: int = 0,
    recoverable: bool = False,
    user_changelog: Path | None = None,
    recent_minutes: int = 0,
    idle_after_s: float | None = None,
    flow_id: str = "listeners",
    sweeper: SweeperConfig | None = None,
    shard_workers: int = 0,
) -> Dataflow:
    """The listener-count dataflow; see the module docstring for its shape.

    ``user_shards``: 0 keys the user stage by ``user_id`` itself, N > 0 by one of N
    shards of users (see ``operators.user_stage`` for the trade-off).
    ``recoverable``: Bytewax recovery is on, so stages build their snapshots; user
    shards then keep their records in changelogs in ``user_changelog``.
    ``recent_minutes``: N > 0 also ranks songs by accepted starts in the last N minutes
    (docs/semantics/windows.md 7, ``operators.recent_plays``); 0 adds nothing to the flow.
    ``idle_after_s``: recent plays in a live run leave an input partition out of the
    watermark once it has had no records this long; None (``--until-eof``) never does.
    ``sweeper``: the idle-playback sweeper of docs/semantics/listeners.md 6 in the user shards (needs
    ``user_shards >= 1``): every batch's source mark reaches every shard, and due
    playbacks get a ``TIMEOUT`` written to the input (``operators.user_stage``).
    ``shard_workers``: N > 0 keys the user stage by input partition instead, on the worker
    that read it, of N workers in all processes (``operators.keyed_shards``); needs
    ``user_shards >= 1`` and no sweeper (whose shards learn every partition's marks).
    """
    if song_partitions < 1:
        raise ValueError("song_partitions must be >= 1")
    if k_max < 1:
        raise ValueError("k_max must be >= 1")
    if user_shards < 0:
        raise ValueError("user_shards must be >= 0")
    if recent_minutes < 0:
        raise ValueError("recent_minutes must be >= 0")
    if recoverable and user_shards and user_changelog is None:
        raise ValueError("recoverable user shards need a user_changelog directory")
    flow = Dataflow(flow_id)
    batches = op.input("input", flow, source)
    stamped = op.inspect_debug("stamp_epoch", batches, stamp_epoch)
    parsed = op.map("parse", stamped, parse_batch)

    if sweeper is not None and user_shards < 1:
        raise ValueError("the sweeper needs user_shards >= 1")
    if shard_workers and (sweeper is not None or user_shards < 1):
        raise ValueError("shards by input partition need user_shards >= 1 and no sweeper")
    changelog = user_changelog if recoverable and user_shards else None
    whole = recoverable and not user_shards
    recent = recent_minutes > 0
    shard_events: KeyedStream[ShardItems]
    if shard_workers:
        shard_events = op.flat_map("user_events", parsed, PartitionShardRouter(shard_workers))
        logic = UserShardLogic.builder(changelog, BY_PARTITION, whole, recent=recent)
    elif sweeper is None:
        shard_events = op.flat_map("user_events", parsed, ShardRouter(user_shards))
        logic = UserShardLogic.builder(changelog, user_shards, whole, recent=recent)
    else:
        shard_events = op.flat_map("user_events", parsed, MarkingShardRouter(user_shards, idle_after_s))
        logic = SweepingShardLogic.builder(changelog, user_shards, whole, recent=recent, sweeper=sweeper)
    decisions = op.stateful_batch("users", shard_events, logic)
    deltas = op.flat_map_batch("net_song_deltas", decisions,
                               partial(combine_song_deltas, partitions=song_partitions))
    ticks: KeyedStream[SongBatch | Tick]
    if recent:  # every tick carries its batch's watermark mark
        ticks = op.flat_map("barrier_ticks", parsed, partial(song_ticks, song_partitions=song_partitions,
                                                             quiet_after_s=idle_after_s))
    else:
        ticks = op.flat_map("barrier_ticks", parsed, partial(ParsedBatch.barrier_ticks, partitions=song_partitions))
    counter_in: KeyedStream[SongBatch | Tick] = op.merge("counter_input", deltas, ticks)
    reports = op.stateful_batch(
        "song_counters", counter_in, song_counters(k_max, recoverable, recent_minutes)
    )

    dead_letters = op.merge(
        "dead_letters",
        op.flat_map("shape_dead_letters", parsed, ParsedBatch.keyed_dead_letters),
        op.flat_map_batch("conflicts", decisions, select_conflicts),
    )
    rank_and_publish(parsed, reports, dead_letters, song_merger(song_partitions, k_max, run_token, recent_minutes),
                     snapshot_sink, dead_letter_sink)
    return flow
