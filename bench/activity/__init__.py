"""``rankflow bench-activity``: the activity flow against the seed's design, side by side.

All in one run, on a local Redis and Kafka-protocol broker that this command starts and
stops itself (:class:`rankflow.bench.rig.Rig`); each part, a module of this package, can be chosen with ``--parts``:

1. **throughput**: one clean message backlog (``generate --kind messages --clean``: many
   workspaces and channels, Zipf, bots and bursts, in order of ``ts``) produced once to a
   topic (8 partitions by default, keyed by user); the seed's design
   (``rankflow.bench.activity_baseline``: ``ZINCRBY`` + ``EXPIRE`` per message, pipelined;
   ``baseline``), its lean variant (one ``EXPIRE`` per key per batch; ``baseline_lean``), the
   flow (``rankflow run --flow activity --until-eof``) and the flow durable (the same with a
   fresh ``--recovery-dir``) each run it from start to exit as their own process, in
   alternating order, ``--reps`` times each. Median events/s, the ratios flow/baseline, the
   CPU the broker and Redis spent beside each run. Exactness: for a sample of workspaces
   (the busiest and ``--compare-workspaces`` drawn at random) every run's counts over the
   flow's final published window equal a count made from the log. The baseline has no
   watermark: its counts are read over the same buckets.
2. **freshness**: for each ``--rates`` value, messages produced at that steady rate (from a
   child process) for ``--steady-s`` while one system follows the topic. The flow: from a
   message's send to the first published snapshot whose positions include it (a poller
   reads the positions every 10 ms). The baseline: to the first pipeline that applied it
   (its positions, written after the increments) and, for the messages of the busiest
   workspaces, which a reader queries continuously, to the first refresh of the workspace's
   cached union (5 s) that includes it: the seed's "counted in a published ranking".
3. **queries**: each system in turn, alone: it loads the backlog and follows the topic;
   per workspace top 100 and channel lookups (workspaces and channels drawn from the
   window's messages, so busy ones are asked more), each open-loop at ``--queries-rate``
   requests/s for ``--queries-s``: ``ActivityReader.top``/``.channel`` on the flow's Redis,
   and the baseline's read path (``BaselineReader``: the cached ``ZUNIONSTORE`` of 60 buckets,
   ``ZREVRANGE``/``ZSCORE`` + ``ZREVRANK``); first while ``--queries-traffic`` messages/s
   flow in, then with the traffic stopped; a ``GET`` of one key as the control of what
   the machine gives any read meanwhile.
4. **memory**: ``--memory-pairs`` (workspace, channel) pairs active in one hour, one message
   each: bytes per active pair of the flow's peak RSS above an empty run's, of Redis
   ``used_memory``, of the durable run's recovery directory; exact and ``--global-summary
   N``; the baseline's Redis. Then a log where ``--memory-churn`` times as many other pairs
   were active in the hours before, and the same pairs in the last hour: the same figures,
   to show memory follows the active pairs, not the pairs that ever existed.
5. **error**: the flow with ``--global-summary N`` for each ``--summaries`` value on the
   backlog: per global item ``count_high - count_low`` and the true error of ``count_low``
   (true counts from the same run's exact workspace rankings), against ``T / N``
   (docs/semantics/windows.md 5), and how much of the exact global top K the summary lists.
6. **profile** (not in the default parts): py-spy of the flow on the backlog, plain and
   durable: the share of CPU samples of each part of the flow (and flame graphs).

Writes ``activity.json`` and ``activity.png`` to ``--out`` (keeping the parts this run did
not measure from the previous ``activity.json``) and prints a table.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from rankflow.bench import rig
from rankflow.bench.activity.core import ActivityBench
from rankflow.bench.activity.error import error
from rankflow.bench.activity.freshness import freshness
from rankflow.bench.activity.memory import memory
from rankflow.bench.activity.profile import profile
from rankflow.bench.activity.queries import queries
from rankflow.bench.activity.report import print_table, write_outputs
from rankflow.bench.activity.results import PARTS, ActivityBenchConfig, ActivityBenchResult, targets
from rankflow.bench.activity.throughput import throughput

__all__ = ["ActivityBench", "ActivityBenchConfig", "ActivityBenchResult", "PARTS", "main", "run"]

MEASURES: dict[str, Callable[[ActivityBench, ActivityBenchResult], None]] = {
    "throughput": throughput, "freshness": freshness, "queries": queries, "memory": memory, "error": error,
    "profile": profile}


def run(cfg: ActivityBenchConfig) -> ActivityBenchResult:
    """Each part of ``cfg.parts``, in the order of :data:`PARTS`, on one rig."""
    bench = ActivityBench(cfg)
    result = ActivityBenchResult(config=asdict(cfg), machine=rig.machine(memory=True))

    def record(part: str, clock: rig.PartClock, wall: float) -> None:
        getattr(result, part).wall_s = wall
        result.measured[part] = clock.measured(wall, asdict(cfg), commit=_commit())

    rig.run_parts(bench, result, MEASURES, cfg.parts, record)
    result.targets = targets(result)
    return result


def _commit() -> str | None:
    """The checkout's commit, ``+dirty`` with uncommitted changes."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, check=True).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def main(cfg: ActivityBenchConfig) -> ActivityBenchResult:
    result = run(cfg)
    rig.report(result, Path(cfg.out), write_outputs, print_table)
    return result
