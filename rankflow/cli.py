"""The ``rankflow`` command line.

Exit status: 0 success, 1 a runtime failure (a service is unreachable, no ranking
yet, a newer run took over), 2 bad usage.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from datetime import datetime, timezone
from typing import Any

import orjson
import redis
from rich.console import Console
from rich.table import Table

from connectors.redis_snapshots import DEFAULT_NAMESPACE, FencedError, connect, read_latest
from rankflow import runner
from rankflow.generate import generate

log = logging.getLogger("rankflow")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _add_redis(p: argparse.ArgumentParser) -> None:
    p.add_argument("--redis", default=runner.default_redis_url(), metavar="URL",
                   help="Redis URL (default: $RANKFLOW_REDIS_URL or %(default)s)")
    p.add_argument("--namespace", default=DEFAULT_NAMESPACE, metavar="NS",
                   help="key namespace in Redis (default: %(default)s)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rankflow", description="Real-time song rankings by current listeners.")
    sub = parser.add_subparsers(dest="command", required=True)

    g = sub.add_parser("generate", help="write a realistic playback log (JSON Lines) with chaos")
    g.add_argument("--users", type=_positive, required=True)
    g.add_argument("--songs", type=_positive, required=True)
    g.add_argument("--events", type=_positive, required=True)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--out", required=True, metavar="PATH")

    r = sub.add_parser("run", help="run the listener-count flow and publish snapshots to Redis")
    r.add_argument("--input", required=True, metavar="URI", help="jsonl:PATH")
    r.add_argument("--until-eof", action="store_true",
                   help="stop at the end of the input (default: keep following it)")
    _add_redis(r)
    r.add_argument("--dead-letter", default=runner.DEFAULT_DEAD_LETTER, metavar="URI",
                   help="where invalid events go (default: %(default)s)")
    r.add_argument("--song-partitions", type=_positive, default=16, metavar="P")
    r.add_argument("--k-max", type=_positive, default=100, metavar="K")
    r.add_argument("--workers", type=_positive, default=1, metavar="N")
    r.add_argument("--barrier-ms", type=_positive, default=250, metavar="MS",
                   help="snapshot (epoch) interval in milliseconds (default: %(default)s)")

    t = sub.add_parser("top", help="print the latest published ranking")
    t.add_argument("--k", type=int, default=10, help="how many songs (1..K_max, default %(default)s)")
    t.add_argument("--json", action="store_true", help="print one JSON object")
    _add_redis(t)
    return parser


def cmd_generate(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    stats = generate(args.users, args.songs, args.events, args.seed, args.out)
    took = time.perf_counter() - started
    print(f"wrote {stats.lines} events to {args.out} in {took:.1f}s", file=sys.stderr)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    opts = runner.RunOptions(
        input=args.input, until_eof=args.until_eof, redis_url=args.redis, namespace=args.namespace,
        dead_letter=args.dead_letter, song_partitions=args.song_partitions, k_max=args.k_max,
        workers=args.workers, barrier_ms=args.barrier_ms,
    )
    started = time.perf_counter()
    final = runner.run(opts)
    took = time.perf_counter() - started
    if final is not None:
        events = sum(final["positions"].values())
        print(f"done in {took:.2f}s: {events} input records ({events / took:,.0f}/s), "
              f"snapshot {final['snapshot_id']}, {final['total_listeners']} listeners on "
              f"{final['active_songs']} songs, {final['dead_letters']} dead letters -> {opts.dead_letter}",
              file=sys.stderr)
    return 0


def cmd_top(args: argparse.Namespace) -> int:
    client = connect(args.redis)
    try:
        snap = read_latest(client, args.namespace)
    finally:
        client.close()
    if snap is None:
        print(f"rankflow: no ranking has been published in namespace {args.namespace!r} yet", file=sys.stderr)
        return 1
    k_max = snap["k_max"]
    if not 1 <= args.k <= k_max:
        print(f"rankflow: --k must be between 1 and K_max ({k_max}), got {args.k}", file=sys.stderr)
        return 2
    view = top_view(snap, args.k)
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(view) + b"\n")
    else:
        print_table(view)
    return 0


def top_view(snap: dict[str, Any], k: int) -> dict[str, Any]:
    """The reader's view of a snapshot: its metadata and its first ``k`` items."""
    fields = ("snapshot_id", "positions", "published_at", "total_listeners", "counted_users")
    return {**{f: snap[f] for f in fields}, "items": snap["items"][:k]}


def print_table(view: dict[str, Any]) -> None:
    published = datetime.fromtimestamp(view["published_at"] / 1000, tz=timezone.utc)
    table = Table()
    table.add_column("rank", justify="right")
    table.add_column("song_id")
    table.add_column("listeners", justify="right")
    for item in view["items"]:
        table.add_row(str(item["rank"]), item["song_id"], f"{item['listeners']:,}")
    console = Console()
    console.print(f"Top {len(view['items'])} songs by current listeners", style="bold")
    console.print(table)
    positions = ", ".join(f"{p}: {o:,}" for p, o in sorted(view["positions"].items()))
    console.print(f"snapshot {view['snapshot_id']} published {published:%Y-%m-%d %H:%M:%S} UTC; "
                  f"{view['total_listeners']:,} listeners in all; input through {positions}",
                  soft_wrap=True, highlight=False)


COMMANDS = {"generate": cmd_generate, "run": cmd_run, "top": cmd_top}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return COMMANDS[args.command](args)
    except runner.UsageError as exc:
        print(f"rankflow: {exc}", file=sys.stderr)
        return 2
    except (runner.ServiceError, FencedError) as exc:
        print(f"rankflow: {exc}", file=sys.stderr)
        return 1
    except redis.RedisError as exc:
        print(f"rankflow: cannot reach Redis at {getattr(args, 'redis', '?')}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("rankflow: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
