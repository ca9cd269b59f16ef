"""Where the score-board flow's time goes: py-spy profiles of ``rankflow run --flow boards``.

    python scripts/profile_boards.py [--results 1000000] [--players 200000] [--partitions 8] [--out bench-results]

Starts a local Redis and broker, produces the clean signed backlog of
``rankflow bench-boards`` (the same file in ``data/``), and records the flow with
``py-spy record --native`` (Python and native frames), plain and durable
(``--recovery-dir``). Writes ``profile-boards-<name>.svg`` (a flame graph) and
``profile-boards-<name>.txt`` (collapsed stacks of a second run), and prints the
share of CPU samples of each part of the flow, the wall time, and the CPU that the
flow, Redis and the broker used, so a change can be judged by where its time moved.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rankflow.bench import rig  # noqa: E402
from rankflow.bench.boards import BoardsBench, BoardsBenchConfig  # noqa: E402

CONFIGS = {"plain": [], "durable": ["--recovery-dir", "{work}/recovery"]}
PARTS = {  # a frame whose name contains a key counts for the part (innermost frame first, first match wins)
    "garbage collector": ("gc_collect_main",),
    "signature check (HMAC-SHA256)": ("signature::Signer", "sha2::", "hmac::"),  # the kernel's (native/)
    "board counters (the kernel's BoardTable)": ("BoardTable", "board_table", "board_counter"),
    "player stage: rules (apply_result)": ("apply_result", "rankflow_native::rules", "BoardRules"),
    "parse (JSON, validation)": ("rankflow_native", "parse_score_records", "ParsedBatch"),
    "player stage: the rest": ("PlayerShardLogic",),
    "changelog (write, fdatasync)": ("ShardChangelog", "fdatasync", "changelog"),
    "routing, barrier ticks": ("route_board_entries", "ShardRouter", "barrier_ticks"),
    "merger (global tops, snapshot)": ("BoardRanking", "MergerLogic", "BoardsSnapshot", "merger"),
    "publisher: entries to Redis args (BoardsState)": ("BoardsState",),
    "publisher: redis-py (pack, send, wait)": ("Publisher", "hiredis"),
    "Kafka read": ("_KafkaPartition", "rd_kafka"),
    "Bytewax recovery store (pickle, SQLite)": ("sqlite", "rusqlite", "pickle", "Pickler"),
    "start-up (imports)": ("_find_and_load", "_compile_bytecode"),
}
GENERIC = {  # library frames, counted for them only when no frame of the flow's own names a part
    "parse (JSON, validation)": ("orjson",),
    "publisher: redis-py (pack, send, wait)": ("redis/",),
}
def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--results", type=int, default=1_000_000)
    p.add_argument("--players", type=int, default=200_000)
    p.add_argument("--games", type=int, default=4)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--configs", default="plain,durable")
    p.add_argument("--out", default="bench-results")
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    bench = BoardsBench(BoardsBenchConfig(results=a.results, players=a.players, games=a.games,
                                          partitions=a.partitions))
    try:
        with bench.rig as services:
            bench.data.mkdir(exist_ok=True)
            bench.produce(bench.score_log(a.results, a.players, a.games), "profile")
            for name in a.configs.split(","):
                extra = [x.format(work=services.work) for x in CONFIGS[name]]
                for fmt, suffix in (("flamegraph", "svg"), ("raw", "txt")):
                    bench.flush()
                    shutil.rmtree(services.work / "recovery", ignore_errors=True)
                    cmd = bench.flow_cmd("profile", f"prof-{name}-{fmt}", "--until-eof", *extra)
                    broker0, redis0 = services.services_cpu()
                    timed = rig.py_spy(cmd, out / f"profile-boards-{name}.{suffix}", fmt)
                    broker1, redis1 = services.services_cpu()
                    print(f"{name} ({fmt}): {timed.seconds:.1f} s wall, {a.results / timed.seconds:,.0f} results/s "
                          f"under py-spy; Redis {redis1 - redis0:.1f} CPU-s, broker {broker1 - broker0:.1f} CPU-s, "
                          f"flow + py-spy {timed.cpu_s:.1f} CPU-s", flush=True)
                print(f"\n{name} ({out / f'profile-boards-{name}.svg'}), share of the flow's CPU samples:")
                for part, share in rig.profile_shares(out / f"profile-boards-{name}.txt", PARTS, GENERIC).items():
                    print(f"  {share * 100:5.1f}%  {part}")
                print(flush=True)
    finally:
        shutil.rmtree(bench.work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
