"""``rankflow bench-boards``: the score-board flow against the seed's design, side by side.

All in one run, on a local Redis and Kafka-protocol broker that this command starts
and stops itself (:class:`rankflow.bench.rig.Rig`), one module of this package a part; each part can be chosen with
``--parts``:

1. **throughput**: one clean, signed score backlog (``generate_scores``) produced once
   to a topic (8 partitions by default, keyed by player); the baseline
   (``rankflow.bench.boards_baseline``: one Lua script per result, pipelined), the flow
   (``rankflow run --flow boards --until-eof``) and the flow durable (the same with a
   fresh ``--recovery-dir``: the figure that counts) each run it from start to exit as
   their own process (the flow exits after publishing the snapshot that covers the
   end), in alternating order, ``--reps`` times each. Median results/s, ratios
   against the baseline, and the CPU the broker and Redis spent beside each run.
   Exactness: every run's boards are compared with the first baseline run's, score
   per player per board (the baseline keeps no ``reached_at``); mismatches must be 0.
2. **freshness**: a producer thread sends results at a steady ``--rate`` while the
   flow follows the topic; a poller reads the published snapshot id and positions
   every 10 ms. Freshness of a sampled result = from its send to the first
   published snapshot whose positions include it (as a reader polling Redis sees it).
3. **memory**: ``--memory-players`` players with one result each on one game: every
   player on the game's 4 boards (all, best, daily, weekly). Redis ``used_memory``
   growth per board entry (flow and baseline), the flow's peak RSS above an empty
   run's per entry, and the durable run's recovery directory per entry.
4. **reads**: a board of ``--reads-players`` players, then steady traffic at
   ``--reads-traffic`` results/s while the flow publishes; ``BoardReader.top(game,
   "all", 100)`` and ``.player(game, "all", random player)`` each at ``--reads-rate``
   requests/s, open-loop (latency counted from when a request was due), p50/p99.
5. **big**: ``--big-players`` players on one board: the flow on a log with one result
   per player (``--big-mode flow``: load time, peak RSS, Redis ``used_memory``; the
   run is stopped if the machine runs low on memory, and reports how far it got),
   or the Redis side alone (``--big-mode redis``: the boards publisher writing the
   entries of one board straight from this process, in snapshots of
   ``--big-chunk`` entries).

Writes ``boards.json`` and ``boards.png`` to ``--out`` and prints a table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from rankflow.bench import rig
from rankflow.bench.boards.big import big
from rankflow.bench.boards.core import BoardsBench
from rankflow.bench.boards.freshness import freshness
from rankflow.bench.boards.memory import memory
from rankflow.bench.boards.reads import reads
from rankflow.bench.boards.report import print_table, write_outputs
from rankflow.bench.boards.results import PARTS, BoardsBenchConfig, BoardsBenchResult, targets
from rankflow.bench.boards.throughput import throughput

__all__ = ["BoardsBench", "BoardsBenchConfig", "BoardsBenchResult", "PARTS", "main", "run"]

MEASURES: dict[str, Callable[[BoardsBench, BoardsBenchResult], None]] = {
    "throughput": throughput, "freshness": freshness, "memory": memory, "reads": reads, "big": big}


def run(cfg: BoardsBenchConfig) -> BoardsBenchResult:
    """Each part of ``cfg.parts``, in the order of :data:`PARTS`, on one rig."""
    bench = BoardsBench(cfg)
    result = BoardsBenchResult(config=asdict(cfg), machine=rig.machine(memory=True))

    def record(part: str, clock: rig.PartClock, wall: float) -> None:
        for name in ("big", "big_redis") if part == "big" else (part,):
            figures = getattr(result, name)
            if figures is None:
                continue
            if part != "big":  # big's modes time themselves
                figures.wall_s = wall
            result.measured[name] = clock.measured(wall, asdict(cfg), wall_s=figures.wall_s)

    rig.run_parts(bench, result, MEASURES, cfg.parts, record)
    result.targets = targets(result)
    return result


def main(cfg: BoardsBenchConfig) -> BoardsBenchResult:
    result = run(cfg)
    rig.report(result, Path(cfg.out), write_outputs, print_table)
    return result
