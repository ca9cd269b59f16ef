"""The listener product: songs ranked by current listeners (docs/semantics/listeners.md), and by
recent plays (docs/semantics/windows.md 7)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rankflow.arg_types import comma_list, kafka, not_negative, positive
from rankflow.errors import UsageError
from rankflow.products import Option, Product

if TYPE_CHECKING:
    from bytewax.dataflow import Dataflow
    from bytewax.inputs import Source
    from bytewax.outputs import Sink

    from rankflow.api.parts import Part
    from rankflow.api.settings import Settings
    from rankflow.operators.user_stage import SweeperConfig
    from rankflow.options import RunOptions

USER_SHARDS = Option(
    ("--user-shards",), "user_shards", type=int, metavar="N",
    help="key the user stage by N shards of users (players with --flow boards), each with a changelog under "
         "--recovery-dir, or 0 for one key per user (default: %(default)s)")
"""Shared with the boards product, whose player stage is the same keyed shards."""

SHARD_BY = Option(
    ("--shard-by",), "shard_by", choices=("partition", "user"),
    help="key the user shards (players with --flow boards) by input partition, on the worker that read it (no "
         "event crosses to another process; the topic must be keyed by user, by player_id with --flow boards), "
         "or by user (crc32 of the id modulo --user-shards, as before: whatever partition an id's events are in); "
         "the sweeper (--idle-timeout-ms) always keys by user (default: %(default)s)")
"""Shared with the boards product too."""


class Listeners(Product):
    name = "listeners"
    title = "songs by current listeners"
    readers = (("rankflow.cli_listeners", "top", "cmd_top"),)
    routes = ("rankflow.api.ingest", "rankflow.api.rankings")
    serves = "songs ranked by current listeners"
    options = (
        USER_SHARDS,
        SHARD_BY,
        Option(("--hot-threshold",), "hot_threshold", type=float, metavar="N",
               help="split a song whose changes pass N per second (per process) into partial counters; "
                    "0 never splits (default: %(default)s)"),
        Option(("--hot-salts",), "hot_salts", type=positive, metavar="S",
               help="partial counters per split song (default: %(default)s)"),
        Option(("--split-songs",), "split_songs", type=comma_list, metavar="SONG,...",
               help="split these songs into partial counters at their first change, whatever their rate (songs "
                    "known to be hot)"),
        Option(("--recent-minutes",), "recent_minutes", type=not_negative, metavar="N",
               help="also rank songs by plays (accepted starts) in the last N minutes of event time, read with "
                    "`rankflow top --recent`; 0 turns it off (default: %(default)s)"),
        Option(("--idle-timeout-ms",), "idle_timeout_ms", type=not_negative, metavar="T", commands=("run",),
               note=" (the listener flow's sweeper, docs/semantics/listeners.md 6)",
               help="live Kafka input: the idle-playback sweeper (docs/semantics/listeners.md 6) writes a TIMEOUT "
                    "into the input for a counted playback with no HEARTBEAT for T ms, once the flow has processed "
                    "its input up to that deadline; needs --user-shards >= 1; 0: off (default)"),
    )

    def check(self, opts: RunOptions) -> None:
        if opts.hot_salts < 1:
            raise UsageError("--hot-salts must be >= 1")
        if opts.recent_minutes < 0:
            raise UsageError("--recent-minutes must be >= 0 (0 turns recent plays off)")
        if opts.idle_timeout_ms:
            _check_sweeper(opts)
        if opts.hot_threshold < 0:
            raise UsageError("--hot-threshold must be >= 0")

    def layout(self, opts: RunOptions) -> dict[str, Any]:
        layout: dict[str, Any] = {"recent_minutes": opts.recent_minutes}  # the window state is made for its length
        workers = shard_workers(opts)
        if opts.user_shards:  # shards by partition live under keys that depend on the reading worker
            layout["shard_by"] = "partition" if workers else "user"
        if workers:
            layout["workers_in_all"] = workers
        return layout

    def layout_before(self) -> dict[str, Any]:
        return {"shard_by": "user"}  # every run before --shard-by keyed its shards by user

    def build_flow(self, opts: RunOptions, token: int, generation: int, live: bool, source: Source,
                   dead_letter: Sink, fresh: bool, republish: bool, floor: dict[str, int] | None = None) -> Dataflow:
        from rankflow.connectors.redis_listeners import CountTable
        from rankflow.flows.listeners import build_flow
        from rankflow.operators.song_keys import HOT_SONGS
        from rankflow.recovery import user_changelog

        HOT_SONGS.configure(opts.hot_threshold, opts.hot_salts, opts.hot_window_s, frozenset(opts.split_songs))
        return build_flow(
            source,
            dead_letter,
            self.sink(opts, token, generation, live, state=CountTable, floor=floor),
            song_partitions=opts.song_partitions,
            user_shards=opts.user_shards,
            user_changelog=user_changelog(opts.recovery_dir),
            recent_minutes=opts.recent_minutes,
            idle_after_s=None if opts.until_eof else opts.idle_timeout_s,
            sweeper=sweeper_config(opts),
            shard_workers=shard_workers(opts),
            **self.engine(opts, token),
        )

    def serve_parts(self, settings: Settings) -> list[Part]:
        from rankflow.api.parts import ProducerPart
        from rankflow.api.store import ListenerSnapshots

        return [ProducerPart(settings, settings.kafka, "producer", "Events in the POST /events producer's local queue"),
                ListenerSnapshots(settings)]

    def rebuild_problem(self, final: dict[str, Any]) -> str | None:
        if final["total_listeners"] != final["counted_users"]:
            return "the rebuilt ranking breaks total_listeners == counted_users"
        return None

    def counts(self, final: dict[str, Any]) -> str:
        from rankflow.cli_format import quantity

        return f"{quantity(final['total_listeners'])} listeners on {quantity(final['active_songs'])} songs, "



def shard_workers(opts: RunOptions) -> int:
    """The workers of all processes when the user shards are keyed by input partition (``--shard-by
    partition`` with shards and no sweeper), else 0 (``flows.listeners.build_flow``)."""
    if opts.shard_by != "partition" or not opts.user_shards or opts.idle_timeout_ms:
        return 0
    return opts.worker_count


def sweeper_config(opts: RunOptions) -> SweeperConfig | None:
    """The sweeper of docs/semantics/listeners.md 6, when ``--idle-timeout-ms`` asks for it (a live run of a Kafka
    input)."""
    if not opts.idle_timeout_ms:
        return None
    from rankflow.operators.user_stage import SweeperConfig

    from dataclasses import replace

    # the run's client settings: the sweeper writes to the cluster the run reads
    endpoint = replace(kafka(opts.input), settings=opts.kafka_settings)
    return SweeperConfig(opts.idle_timeout_ms, int(opts.idle_timeout_s * 1000), endpoint)


def _check_sweeper(opts: RunOptions) -> None:
    """``--idle-timeout-ms``: the sweeper of docs/semantics/listeners.md 6 writes ``TIMEOUT`` events into the input."""
    if opts.idle_timeout_ms < 0:
        raise UsageError("--idle-timeout-ms must be >= 1 (or 0: no sweeper)")
    if opts.until_eof:
        raise UsageError("--idle-timeout-ms cannot be used with --until-eof: a replay reads its log, it must "
                         "not write to it")
    if not opts.input.startswith("kafka:"):
        raise UsageError("--idle-timeout-ms needs a Kafka input (kafka:HOST:PORT/TOPIC): the sweeper writes its "
                         "TIMEOUT events into the input, and a JSONL log carries them only if something else "
                         "wrote them")
    if opts.user_shards < 1:
        raise UsageError("--idle-timeout-ms needs --user-shards >= 1: the sweeper lives in the user shards "
                         "(with --user-shards 0 it could not list a shard's users)")


PRODUCT = Listeners()
