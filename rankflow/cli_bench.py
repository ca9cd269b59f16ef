"""``rankflow bench``, ``bench-sweep``, ``bench-boards``, ``bench-activity``: their options.

The benchmarks live in ``rankflow.bench`` (the top-level ``bench/`` folder), beside the
runtime: this module only declares their options, and each command imports its
benchmark when it runs, so that ``rankflow`` starts without loading any of them
(``tests/cli/test_packaging.py`` checks it). The defaults are the benchmarks' own
configurations' (``tests/cli/test_cli_bench.py`` checks that they agree).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from rankflow.cli_help import example
from rankflow.options import UsageError

Type = Callable[[str], Any]

LISTENERS_PARTS = ("throughput", "freshness", "memory", "processes")
BOARDS_PARTS = ("throughput", "freshness", "memory", "reads", "big")
ACTIVITY_PARTS = ("throughput", "freshness", "queries", "memory", "error", "profile")


def _parts(text: str) -> tuple[str, ...]:
    return tuple(x for x in text.split(",") if x)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x)


def add_parsers(sub: Any, positive: Type, not_negative: Type) -> None:
    """The four bench commands on ``sub`` (``positive``, ``not_negative``: the CLI's number checks)."""
    _listeners(sub, positive, not_negative)
    _sweep(sub, positive)
    _boards(sub, positive)
    _activity(sub)


def _listeners(sub: Any, positive: Type, not_negative: Type) -> None:
    bn = sub.add_parser("bench", help="rankflow vs the seed's first design: throughput, freshness, memory",
                       epilog=example("rankflow bench --events 200000 --parts throughput --out bench-results", after=None,
                                      note="Each benchmark starts its own Redis and broker; the chart needs the bench extras, which `make bench` installs."))
    bn.add_argument("--events", type=positive, default=1_000_000, help="backlog size (default: %(default)s)")
    bn.add_argument("--users", type=positive, default=100_000)
    bn.add_argument("--songs", type=positive, default=20_000)
    bn.add_argument("--rate", type=positive, default=20_000, help="steady events/s for freshness")
    bn.add_argument("--steady-s", type=float, default=30.0, help="seconds of steady traffic")
    bn.add_argument("--memory-users", type=positive, default=1_000_000)
    bn.add_argument("--out", default="bench-results", help="where bench.json and bench.png go")
    bn.add_argument("--parts", type=_parts, default=LISTENERS_PARTS, metavar="PART,...",
                    help="throughput, freshness, memory, processes (default: all)")
    bn.add_argument("--recent-minutes", type=not_negative, metavar="N",
                    help="rankflow runs with --recent-minutes N (default: run's default, 5; 0: recent plays off)")


def _sweep(sub: Any, positive: Type) -> None:
    sw = sub.add_parser("bench-sweep", help="throughput across partitions x users vs the lean baseline",
                        epilog=example("rankflow bench-sweep --events 200000 --users 100000 --partitions 4,8 "
                                       "--out bench-results", after=None, note="Each benchmark starts its own Redis and broker; the chart needs the bench extras, which `make bench` installs."))
    sw.add_argument("--events", type=positive, default=1_000_000, help="events per log (default: %(default)s)")
    sw.add_argument("--users", type=lambda t: tuple(int(x) for x in t.split(",")), default=(100_000, 1_000_000),
                    metavar="N,...", help="users of each log (default: 100000,1000000)")
    sw.add_argument("--partitions", type=lambda t: tuple(int(x) for x in t.split(",")), default=(4, 8, 16, 32),
                    metavar="P,...", help="partitions of each topic (default: 4,8,16,32)")
    sw.add_argument("--out", default="bench-results", help="where sweep.json and sweep.png go")


def _boards(sub: Any, positive: Type) -> None:
    bb = sub.add_parser("bench-boards", help="the score-board flow vs the seed's design: throughput, freshness, "
                                            "memory, reads, 10M players",
                        epilog=example("rankflow bench-boards --results 200000 --parts throughput --out bench-results",
                                       after=None, note="Each benchmark starts its own Redis and broker; the chart needs the bench extras, which `make bench` installs."))
    bb.add_argument("--results", type=positive, default=1_000_000, help="backlog size (default: %(default)s)")
    bb.add_argument("--players", type=positive, default=200_000, help="players of the backlog (default: %(default)s)")
    bb.add_argument("--games", type=positive, default=4, help="games of the backlog (default: %(default)s)")
    bb.add_argument("--partitions", type=positive, default=8, help="topic partitions (default: %(default)s)")
    bb.add_argument("--reps", type=positive, default=2, help="runs of each system, alternating (default: %(default)s)")
    bb.add_argument("--rate", type=positive, default=12_000,
                    help="steady results/s for freshness (default: %(default)s)")
    bb.add_argument("--steady-s", type=float, default=30.0, help="seconds of steady traffic (default: %(default)s)")
    bb.add_argument("--memory-players", type=positive, default=1_000_000,
                    help="players with one result each, on 4 boards (default: %(default)s)")
    bb.add_argument("--reads-players", type=positive, default=1_000_000,
                    help="players on the board the readers query (default: %(default)s)")
    bb.add_argument("--reads-traffic", type=positive, default=2_000,
                    help="results/s the flow publishes while the readers run (default: %(default)s)")
    bb.add_argument("--reads-rate", type=positive, default=1_000,
                    help="requests/s of each query (default: %(default)s)")
    bb.add_argument("--reads-s", type=float, default=10.0, help="seconds of each query's load (default: %(default)s)")
    bb.add_argument("--big-players", type=positive, default=10_000_000,
                    help="players on one board (default: %(default)s)")
    bb.add_argument("--big-mode", choices=("flow", "redis", "both"), default="both",
                    help="flow: the flow loads a log of one result per player; redis: the boards publisher alone "
                         "writes one board; both: one then the other (default: %(default)s)")
    bb.add_argument("--big-min-free-gib", type=float, default=2.0,
                    help="stop the big run when the machine has less memory available (default: %(default)s)")
    bb.add_argument("--seed", type=int, default=1)
    bb.add_argument("--out", default="bench-results", help="where boards.json and boards.png go")
    bb.add_argument("--parts", type=_parts, default=BOARDS_PARTS[:4], metavar="PART,...",
                    help="throughput, freshness, memory, reads, big (default: all but big)")


def _activity(sub: Any) -> None:
    p = sub.add_parser("bench-activity", help="the activity flow vs the seed's design: throughput, freshness, "
                                              "queries, memory, summary error",
                       epilog=example("rankflow bench-activity --events 200000 --parts throughput --out bench-results",
                                      after=None, note="Each benchmark starts its own Redis and broker; the chart needs the bench extras, which `make bench` installs."))
    p.add_argument("--events", type=int, default=1_000_000, help="backlog size (default: %(default)s)")
    p.add_argument("--workspaces", type=int, default=5_000, help="backlog workspaces (default: %(default)s)")
    p.add_argument("--channels", type=int, default=5_000,
                   help="channels of the biggest workspace (default: %(default)s)")
    p.add_argument("--users", type=int, default=10_000, help="users of the biggest workspace (default: %(default)s)")
    p.add_argument("--event-rate", type=float, default=100.0,
                   help="backlog messages per second of event time (default: %(default)s)")
    p.add_argument("--partitions", type=int, default=8, help="topic partitions (default: %(default)s)")
    p.add_argument("--reps", type=int, default=2, help="runs of each system, alternating (default: %(default)s)")
    p.add_argument("--no-durable", dest="durable", action="store_false",
                   help="throughput and profile: leave out the flow with --recovery-dir")
    p.add_argument("--compare-workspaces", type=int, default=200,
                   help="workspaces drawn at random (besides the 10 busiest) whose counts are compared "
                        "(default: %(default)s)")
    p.add_argument("--rates", type=_ints, default=(50_000, 25_000), metavar="N,...",
                   help="freshness: steady events/s, each measured (default: 50000,25000)")
    p.add_argument("--steady-s", type=float, default=30.0,
                   help="seconds of steady traffic (default: %(default)s)")
    p.add_argument("--queries-rate", type=int, default=1_000,
                   help="requests/s of each query (default: %(default)s)")
    p.add_argument("--queries-s", type=float, default=60.0,
                   help="seconds of each query's load while traffic flows (at most 10 once it stopped); a "
                        "minute or more sees a bucket leave the window, as every minute of a live run does "
                        "(default: %(default)s)")
    p.add_argument("--queries-traffic", type=int, default=2_000,
                   help="events/s flowing in during the first phase (default: %(default)s)")
    p.add_argument("--publish-stage", type=int, default=None,
                   help="the flow's --publish-stage (0: every snapshot in one Redis call; default: the flow's, "
                        "2000 in a live run, 0 with --until-eof)")
    p.add_argument("--memory-pairs", type=int, default=1_000_000,
                   help="active (workspace, channel) pairs (default: %(default)s)")
    p.add_argument("--memory-workspaces", type=int, default=1_000,
                   help="their workspaces (default: %(default)s)")
    p.add_argument("--memory-churn", type=int, default=3,
                   help="hours before, each with as many other pairs that come and go; 0: no churn run "
                        "(default: %(default)s)")
    p.add_argument("--memory-summary", type=int, default=1_000,
                   help="the summary run's --global-summary N; 0: no summary run (default: %(default)s)")
    p.add_argument("--no-memory-durable", dest="memory_durable", action="store_false",
                   help="memory: leave out the durable runs (the recovery directory)")
    p.add_argument("--summaries", type=_ints, default=(100, 1_000), metavar="N,...",
                   help="error: the --global-summary values measured (default: 100,1000)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="bench-results",
                   help="where activity.json and activity.png go (default: %(default)s)")
    p.add_argument("--parts", type=_parts, default=ACTIVITY_PARTS[:5], metavar="PART,...",
                   help=f"{', '.join(ACTIVITY_PARTS)} (default: all but profile)")


def _check_parts(parts: tuple[str, ...], known: tuple[str, ...]) -> None:
    unknown = [p for p in parts if p not in known]
    if unknown:
        raise UsageError(f"--parts: unknown {', '.join(unknown)}; choose from {', '.join(known)}")


def _config(cls: Any, args: argparse.Namespace) -> Any:
    """``cls`` (a benchmark's configuration) from the options it has: its fields are the options' names."""
    names = set(cls.__dataclass_fields__)
    return cls(**{k: v for k, v in vars(args).items() if k in names})


def cmd_bench(args: argparse.Namespace) -> int:
    _check_parts(args.parts, LISTENERS_PARTS)
    from rankflow.bench.listeners import BenchConfig, main

    main(_config(BenchConfig, args))
    return 0


def cmd_bench_sweep(args: argparse.Namespace) -> int:
    from rankflow.bench.listeners import SweepConfig, sweep_main

    sweep_main(_config(SweepConfig, args))
    return 0


def cmd_bench_boards(args: argparse.Namespace) -> int:
    _check_parts(args.parts, BOARDS_PARTS)
    from rankflow.bench.boards import BoardsBenchConfig, main

    main(_config(BoardsBenchConfig, args))
    return 0


def cmd_bench_activity(args: argparse.Namespace) -> int:
    _check_parts(args.parts, ACTIVITY_PARTS)
    from rankflow.bench.activity import ActivityBenchConfig, main

    main(_config(ActivityBenchConfig, args))
    return 0


COMMANDS = {"bench": cmd_bench, "bench-sweep": cmd_bench_sweep, "bench-boards": cmd_bench_boards,
            "bench-activity": cmd_bench_activity}
