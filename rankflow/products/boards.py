"""The boards product: game score boards (docs/semantics/boards.md)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rankflow.arg_types import within
from rankflow.errors import ServiceError, UsageError
from rankflow.products import Option, Product
from rankflow.products.listeners import SHARD_BY, USER_SHARDS, shard_workers

if TYPE_CHECKING:
    import redis
    from bytewax.dataflow import Dataflow
    from bytewax.inputs import Source
    from bytewax.outputs import Sink

    from rankflow.api.parts import Part
    from rankflow.api.settings import Settings
    from rankflow.options import RunOptions

log = logging.getLogger("rankflow.run")

SIGNING_KEY_ENV = "RANKFLOW_SIGNING_KEY"
BOARDS_K_MAX = 10


def signing_key(option: str | None, environ: Mapping[str, str]) -> bytes | None:
    """``--signing-key``, else ``$RANKFLOW_SIGNING_KEY`` (which keeps the key out of the process list)."""
    from rankflow.state.signatures import parse_key

    text = option if option is not None else environ.get(SIGNING_KEY_ENV)
    if text is None:
        return None
    try:
        return parse_key(text)
    except ValueError as exc:
        raise UsageError(f"--signing-key / ${SIGNING_KEY_ENV}: {exc}") from None


KEEP_FINAL_DAYS = 30
"""``--keep-final``'s default: a month of each period's final standings after retention drops it."""


def seasons_of(path: str | None) -> Any:
    """``--seasons FILE`` read and checked (a usage error names the mistake), before any service is asked."""
    from rankflow.state.seasons import read_seasons

    if path is None:
        return ()
    try:
        return read_seasons(path)
    except ValueError as exc:
        raise UsageError(f"--seasons: {exc}") from None


class Boards(Product):
    name = "boards"
    title = "game score boards"
    readers = (("rankflow.cli_boards", "boards", "cmd_boards"),)
    routes = ("rankflow.api.match_results", "rankflow.api.boards", "rankflow.api.board_stream")
    serves = "game score boards"
    read_batch = 2_000
    """A snapshot's script holds Redis for every entry its epoch changed, and a read cannot span
    epochs: 8 partitions read 30,000 at a time made snapshots of 240,000 results, whose script
    held Redis 2-8 s (readers got ``BUSY``) while loading a backlog (docs/benchmarks.md)."""
    options = (
        Option(("--signing-key",), "signing_key", metavar="HEX",
               resolve=lambda given: signing_key(given, os.environ),
               help=f"the match servers' HMAC-SHA256 key; results must carry a valid sig (default: "
                    f"${SIGNING_KEY_ENV}; without either, signatures are not checked)"),
        USER_SHARDS,
        SHARD_BY,
        Option(("--rank-change",), "rank_change", action="store_true", default=False,
               help="keep each changed board's moved entries in Redis beside the snapshot, so every answer's "
                    "entries carry rank_change, the positions gained since the board's previous change "
                    "(docs/semantics/boards.md 5.5; Redis works about 1.4 times as hard publishing)"),
        Option(("--seasons",), "seasons", metavar="FILE", resolve=seasons_of, default=(),
               help="a JSON or TOML file of seasons, {NAME: {start, end}} as ISO dates or instants: each is a "
                    "board season:NAME of the points played in [start, end) (docs/semantics/boards.md 9)"),
        Option(("--keep-final",), "keep_final", metavar="DAYS", type=within(0, 3660), default=KEEP_FINAL_DAYS,
               help="keep each period retention drops (a day, a week, a season) as its final standings, "
                    "final:BOARD, for DAYS days more (default %(default)s; 0: drop them as before)"),
    )
    k_max = BOARDS_K_MAX  # the live top 10: the whole boards are in Redis, and a longer list costs every barrier

    def namespace(self, namespace: str) -> str:
        from rankflow.connectors.redis_keys import boards_namespace

        return boards_namespace(namespace)

    def layout(self, opts: RunOptions) -> dict[str, Any]:
        from rankflow.recovery import KEY_FINGERPRINT, WORKERS_IN_ALL, key_fingerprint

        from rankflow.state.seasons import fingerprint

        # the boards hold results checked with the key; the players' records hold their seasons' sums
        # (a season added on resume would miss the results before it): a resume keeps both
        layout: dict[str, Any] = {KEY_FINGERPRINT: key_fingerprint(opts.signing_key),
                                  "seasons": fingerprint(opts.option("seasons") or ())}
        workers = shard_workers(opts)
        if opts.user_shards:  # shards by partition live under keys that depend on the reading worker
            layout["shard_by"] = "partition" if workers else "user"
        if workers:
            layout[WORKERS_IN_ALL] = workers
        return layout

    def layout_before(self) -> dict[str, Any]:
        # a directory made before seasons were recorded had none; every run before --shard-by keyed
        # its player shards by player
        return {"seasons": None, "shard_by": "user"}

    def warn(self, opts: RunOptions) -> None:
        """A run without a signing key counts every result as its match server sent it: say so once
        at start, as ``serve`` does for an ingest without a token."""
        if opts.signing_key is None:
            log.warning("no signing key: results' signatures are not checked, anyone who can write to the input "
                        "can post scores; set --signing-key or $%s", SIGNING_KEY_ENV)

    def must_republish(self, client: redis.Redis, opts: RunOptions, generation: int, fresh: bool,
                       floor: dict[str, int] | None = None) -> bool:
        """A resumed run must send every board again when Redis has no snapshot of its generation
        (it lost its data while the run was down), or holds positions behind ``floor``, those of
        the last snapshot the run's recovery state had emitted (the run died or stopped while
        Redis did not store them, or Redis was restored from an older backup): the changes in
        between are in no snapshot the run will emit again. The listener and activity flows
        send their whole state with every execution's first snapshot instead."""
        from rankflow.connectors.redis_keys import Keys

        if fresh:
            return False
        keys = Keys(opts.redis_namespace, generation)
        if not client.exists(keys.snapshot_id):
            why = f"Redis has no snapshot of generation {generation}"
        else:
            behind = _behind(client.hgetall(keys.positions), floor or {})
            if behind is None:
                return False
            why = (f"Redis holds generation {generation} at {behind}, behind this run's recovery state (it was "
                   "restored from an older backup, or snapshots were not stored before the run stopped)")
        if not opts.user_shards:
            raise ServiceError(f"{why}, and a run with --user-shards 0 cannot send every board again: resume with "
                               "the default player shards, or rebuild (`rankflow rebuild --flow boards`)")
        log.warning("%s: every player's entries are published again", why)
        return True

    def serve_parts(self, settings: Settings) -> list[Part]:
        from rankflow.api.board_watch import BoardParts
        from rankflow.api.parts import ProducerPart

        return [ProducerPart(settings, settings.score_kafka, "score_producer",
                             "Match results in the POST /matches producer's local queue"), BoardParts(settings)]

    def build_flow(self, opts: RunOptions, token: int, generation: int, live: bool, source: Source,
                   dead_letter: Sink, fresh: bool, republish: bool, floor: dict[str, int] | None = None) -> Dataflow:
        from rankflow.connectors.redis_boards import BoardsState
        from rankflow.flows.boards import build_flow
        from rankflow.recovery import user_changelog

        return build_flow(
            source,
            dead_letter,
            self.sink(opts, token, generation, live, state=lambda: BoardsState(complete=fresh or republish,
                                                                      rank_change=bool(opts.option("rank_change"))),
                      floor=floor),
            board_partitions=opts.song_partitions,
            signing_key=opts.signing_key,
            user_shards=opts.user_shards,
            user_changelog=user_changelog(opts.recovery_dir),
            republish=republish,
            seasons=opts.option("seasons") or (),
            keep_final=opts.option("keep_final"),
            shard_workers=shard_workers(opts),
            **self.engine(opts, token),
        )


def _behind(stored: dict[Any, Any], floor: dict[str, int]) -> str | None:
    """The first partition whose stored position (``HGETALL`` of the positions hash) is behind
    ``floor``, said as ``partition at X, the run needs Y``; None if none is."""
    held = {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in stored.items()}
    for part, needed in sorted(floor.items()):
        if held.get(part, -1) < needed:
            return f"{part} at {held.get(part, 'nothing')} where the run needs {needed}"
    return None


PRODUCT = Boards()
