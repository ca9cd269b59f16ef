"""Game score boards (docs/semantics/boards.md): the whole dataflow in one place.

===================  ================  ==============================================
step                 keyed by          what it does
===================  ================  ==============================================
input                (source part.)    one ``SourceBatch`` per batch of raw records
stamp_epoch                            the batch learns its epoch: its barrier
parse                                  checks 1-6 of docs/semantics/boards.md 1 (shape, ranges,
                                       signature) once per record
player_results       source part.      a batch's results as one item, on the worker that
                     (or shard, player) read it (``shard_workers``); or one item per
                                       player shard (or per player with ``user_shards=0``)
players              source part.      checks 7-8, exactly once per (game, match,
                     (or shard, player) player), scores and ``reached_at`` on every
                                       board (docs/semantics/boards.md 1-4): changed entries
board_entries                          routes entries to board partitions by player
barrier_ticks        board partition   one per partition per source batch
board_counters       board partition   the kernel's table: per board a bounded top of
                                       the local best; a report per closed epoch
merger               ``"merger"``      P reports of an epoch -> each changed board's
                                       global top, retention, aliases, positions
publish                                one atomic Redis script per snapshot: the
                                       entries into each board's sorted set
dead_letter_output                     shape errors, bad signatures, too old, in
                                       the future, conflicts: with reasons
===================  ================  ==============================================

The listener flow's engine, with other rules: the same parse step, keyed shards,
counter stage, merger and publisher (``flows/listeners.py`` explains the barriers).
An accepted result's entries on all its boards travel in its epoch, so a snapshot
holds a result wholly or not at all (docs/semantics/boards.md section 6).

Keyed by input partition (``--shard-by partition``, the default with player shards), a
player's record lives in the shard of the partition its results come from: the topic must be
keyed by ``player_id`` (docs/semantics/boards.md section 2 asks it for the order of a player's
results anyway). Then no result crosses workers: only the entries of accepted ones do, to the
board partitions. Keyed by player shard (``--shard-by user``) a player has one record whatever
partitions its results come from (docs/operations.md, "Keying the per-entity stage").
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

from rankflow.operators.board_counter import BoardTable
from rankflow.operators.board_ranking import BoardRanking
from rankflow.operators.counter import CounterLogic
from rankflow.operators.engine_types import Tick
from rankflow.operators.keyed_shards import BY_PARTITION, PartitionShardRouter, ShardItems, ShardRouter
from rankflow.operators.merger import MergerLogic
from rankflow.operators.metrics import METRICS
from rankflow.operators.parse import ParsedBatch, stamp_epoch
from rankflow.operators.ranking_stage import rank_and_publish
from rankflow.operators.player_stage import VERDICTS, PlayerShardLogic, select_dead_letters, select_tallies
from rankflow.operators.routing import BoardBatch, route_board_entries
from rankflow.state.events import DeadLetter
from rankflow.state.score_events import PLAYER_ID, parse_score_records
from rankflow.state.seasons import Seasons


def build_flow(
    source: Source[SourceBatch],
    dead_letter_sink: Sink[tuple[str, DeadLetter]],
    snapshot_sink: Sink[tuple[str, Any]],
    *,
    board_partitions: int,
    k_max: int,
    run_token: int,
    signing_key: bytes | None = None,
    user_shards: int = 0,
    recoverable: bool = False,
    user_changelog: Path | None = None,
    republish: bool = False,
    flow_id: str = "boards",
    seasons: Seasons = (),
    keep_final: int = 0,
    shard_workers: int = 0,
    group_by: str | None = None,
) -> Dataflow:
    """The score-board dataflow; see the module docstring for its shape.

    ``signing_key``: results must carry a valid ``sig`` (check 6); None checks none.
    ``k_max``: how many entries of each changed board a snapshot document lists (the
    whole boards are in Redis). Sharding and recovery as ``flows.listeners.build_flow``.
    ``republish``: a resumed run whose Redis lost the boards sends every player's
    entries again in its first epoch (needs player shards: ``user_shards`` > 0).
    ``seasons``: boards of spans set by configuration; ``keep_final``: days a dropped period's
    final standings are kept (0: none; docs/semantics/boards.md section 9).
    ``shard_workers``: N > 0 keys the player stage by input partition, on the worker that read
    it, of N workers in all processes (``operators.keyed_shards``); needs ``user_shards >= 1``.
    ``group_by``: a result field whose value keeps one set of boards per value (docs/semantics/boards.md
    10): read by the parse step, entered by the player stage under the game key ``GAME@FIELD=VALUE``.
    """
    if board_partitions < 1:
        raise ValueError("board_partitions must be >= 1")
    if k_max < 1:
        raise ValueError("k_max must be >= 1")
    if user_shards < 0:
        raise ValueError("user_shards must be >= 0")
    if recoverable and user_shards and user_changelog is None:
        raise ValueError("recoverable player shards need a user_changelog directory")
    if shard_workers and user_shards < 1:
        raise ValueError("shards by input partition need user_shards >= 1")
    METRICS.verdicts = VERDICTS
    season_ends = {season.board: season.last_day for season in seasons}  # retention's last day of each
    flow = Dataflow(flow_id)
    batches = op.input("input", flow, source)
    stamped = op.inspect_debug("stamp_epoch", batches, stamp_epoch)
    parsed = op.map("parse", stamped, partial(ParsedBatch, parse=partial(parse_score_records, key=signing_key, group=group_by)))

    results: KeyedStream[ShardItems]
    if shard_workers:
        results = op.flat_map("player_results", parsed, PartitionShardRouter(shard_workers, touch_all=republish))
    else:
        results = op.flat_map("player_results", parsed, ShardRouter(user_shards, id_field=PLAYER_ID,
                                                                    touch_all=republish))
    changelog = user_changelog if recoverable and user_shards else None
    whole = recoverable and not user_shards
    shards = BY_PARTITION if shard_workers else user_shards
    decisions = op.stateful_batch("players", results, PlayerShardLogic.builder(changelog, shards, whole,
                                                                                    republish=republish,
                                                                                    seasons=seasons))
    entries = op.flat_map_batch("board_entries", decisions, partial(route_board_entries, partitions=board_partitions))
    ticks = op.flat_map("barrier_ticks", parsed, partial(ParsedBatch.barrier_ticks, partitions=board_partitions))
    counter_in: KeyedStream[BoardBatch | Tick] = op.merge("counter_input", entries, ticks)
    reports = op.stateful_batch(
        "board_counters", counter_in,
        CounterLogic.builder(lambda stored: BoardTable(k_max, stored, season_ends), recoverable),
    )

    dead_letters = op.merge(
        "dead_letters",
        op.flat_map("shape_dead_letters", parsed, ParsedBatch.keyed_dead_letters),
        op.flat_map_batch("rejected", decisions, select_dead_letters),
    )
    rank_and_publish(parsed, reports, dead_letters, MergerLogic.builder(
        board_partitions, lambda stored: BoardRanking(k_max, stored, season_ends, keep_final,
                                                   recoverable), run_token), snapshot_sink, dead_letter_sink,
        op.flat_map_batch("tallies", decisions, select_tallies))
    return flow
