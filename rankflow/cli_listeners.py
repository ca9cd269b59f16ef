"""``rankflow top``: reading the listener rankings from the command line.

The latest published ranking by current listeners, or with ``--recent`` by plays in the
last minutes of event time (docs/semantics/windows.md 7); one JSON object with ``--json``, or a
table. Exit status: 0 an answer, 1 no usable ranking (or a stale one: it is shown, and
said to be stale), 2 bad usage (``-k/--limit`` outside 1..K_max: never clamped).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any
from collections.abc import Callable

from rankflow.cli_errors import refuse
from rankflow.cli_format import positions, print_rows, quantity, utc
from rankflow.cli_help import REDIS, example
from rankflow.cli_query import add_option
from rankflow.connectors.redis_publish import dumps_document
from rankflow.reader import RankingReader, default_cache_path


def add_parser(sub: Any, add_redis: Callable[[argparse.ArgumentParser], None]) -> None:
    t = sub.add_parser("top", help="print the latest published ranking",
                       epilog=example(f"rankflow top -k 10 --redis {REDIS}", f"rankflow top --recent -k 5 --json --redis {REDIS}",
                                      after="the listeners run of `rankflow run --help`"))
    add_option(t, ("-k", "--limit"), "--k", type=int, default=10, metavar="K",
               help="how many songs: the first K (1..K_max, default %(default)s)")
    t.add_argument("--recent", action="store_true",
                   help="songs by plays in the last --recent-minutes of event time (default: by current listeners)")
    t.add_argument("--json", action="store_true", help="print one JSON object")
    add_redis(t)


def cmd_top(args: argparse.Namespace) -> int:
    reading = RankingReader(args.redis, args.namespace, default_cache_path(args.redis, args.namespace),
                            read_urls=args.redis_read, first_contact=True).read()
    snap = reading.snapshot
    if snap is None:
        return refuse(f"{reading.problem}; no earlier ranking cached", 1)
    k_max = snap["k_max"]
    if not 1 <= args.limit <= k_max:
        return refuse(f"-k/--limit must be between 1 and K_max ({k_max}), got {args.limit}", 2)
    if args.recent:
        if snap.get("recent") is None:
            return refuse("this ranking has no recent plays: the flow runs with --recent-minutes 0", 1)
        view = recent_view(snap, args.limit, reading.stale, reading.age_ms)
    else:
        view = top_view(snap, args.limit, reading.stale, reading.age_ms)
    if args.json:
        sys.stdout.buffer.write(dumps_document(view) + b"\n")
    elif args.recent:
        print_recent_table(view)
    else:
        print_table(view)
    if reading.stale:
        return refuse(f"{reading.problem}; showing the last ranking read, {(reading.age_ms or 0) / 1000:.0f}s old (stale)",
                      1)
    return 0


def top_view(snap: dict[str, Any], k: int, stale: bool, age_ms: int | None) -> dict[str, Any]:
    """The reader's view of a snapshot: its metadata and its first ``k`` items."""
    fields = ("snapshot_id", "positions", "published_at", "total_listeners", "counted_users")
    return {**{f: snap[f] for f in fields}, "stale": stale, "age_ms": age_ms, "items": snap["items"][:k]}


def recent_view(snap: dict[str, Any], k: int, stale: bool, age_ms: int | None) -> dict[str, Any]:
    """The reader's view of a snapshot's recent plays (docs/semantics/windows.md 7): the snapshot's metadata,
    the window, the watermark and the first ``k`` items ``{rank, song_id, plays}``."""
    recent = snap["recent"]
    return {**{f: snap[f] for f in ("snapshot_id", "positions", "published_at")}, "stale": stale, "age_ms": age_ms,
            **{f: recent[f] for f in ("window_start", "window_end", "watermark")}, "items": recent["items"][:k]}


def print_recent_table(view: dict[str, Any]) -> None:
    if view["watermark"] is None:
        span, window = "", "no event time yet"
    else:
        span = f" in the last {(view['window_end'] - view['window_start']) // 60_000} minutes"
        window = (f"window {utc(view['window_start'])} to {utc(view['window_end'])} (end excluded, event time), "
                  f"watermark {utc(view['watermark'])}")
    _print_songs(view, "plays", f"songs by plays{span}", [window])


def print_table(view: dict[str, Any]) -> None:
    _print_songs(view, "listeners", "songs by current listeners",
                 [f"{quantity(view['total_listeners'])} listeners in all"])


def _print_songs(view: dict[str, Any], column: str, what: str, footer: list[str]) -> None:
    """A table of ``view``'s songs and their ``column``, under "Top N ``what``", then ``footer``
    and the snapshot's line."""
    print_rows(f"Top {len(view['items'])} {what}", ("rank", "song_id", column), view["items"],
                [*footer, f"snapshot {view['snapshot_id']} published {utc(view['published_at'])}; input through "
                          f"{positions(view['positions'])}"],
                warning=f"STALE: this ranking is {view['age_ms'] / 1000:.0f}s old" if view["stale"] else None)
