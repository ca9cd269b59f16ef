"""Where a run's time goes: py-spy flame graphs of rankflow on a backlog.

    python scripts/profile_flow.py [--events 1000000] [--partitions 8] [--out bench-results]

Starts a local Redis and broker, produces the benchmark log, and records each
configuration with ``py-spy record --native --subprocesses`` (Python and native
frames, every process of a run): one process, one process with ``--recovery-dir``,
and two processes. Writes ``profile-<name>.svg`` (open in a browser) and
``profile-<name>.txt`` (collapsed stacks), and prints the share of the main parts
of the flow for each, so a change can be judged by where its time moved.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rankflow.bench import rig  # noqa: E402
from rankflow.bench.listeners import ListenersRig  # noqa: E402

CONFIGS = {
    "one-process": [],
    "one-process-durable": ["--recovery-dir", "{work}/recovery"],
    "two-processes": ["--processes", "2"],
}
PARTS = {  # a frame whose name contains the key counts for the part (first match wins, innermost frame first)
    "parse (JSON, validation)": ("parse_records", "orjson"),
    "user stage (rules)": ("_apply", "apply_event"),
    "changelog (write, fdatasync)": ("ShardChangelog", "fdatasync"),
    "net deltas, routing": ("combine_song_deltas", "ShardRouter", "barrier_ticks", "song_ticks"),
    "song counters": ("SongCounterLogic", "RetractableIndex", "SortedList"),
    "Kafka read": ("_KafkaPartition", "rd_kafka"),
    "exchange between processes (pickle, bincode)": ("pickle", "bincode", "Pickler", "Unpickler"),
    "Bytewax recovery store (SQLite)": ("sqlite", "rusqlite"),
    "merger, publish": ("MergerLogic", "SongRanking", "Publisher", "redis/"),
    "start-up (imports)": ("_find_and_load", "_compile_bytecode"),
}


IDLE = ("Condition.wait", "Queue.get")  # a thread waiting for work (the publisher): py-spy --native counts it


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--users", type=int, default=100_000)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--out", default="bench-results")
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    with ListenersRig() as bench:
        topic = "profile"
        bench.produce(bench.log_file(a.events, a.users, 20_000), topic, a.partitions)
        for name, extra in CONFIGS.items():
            cmd = bench.rankflow_cmd(topic, name, "--until-eof", *(x.format(work=bench.work) for x in extra))
            for fmt, suffix in (("flamegraph", "svg"), ("raw", "txt")):
                if fmt == "raw":  # the collapsed stacks of a second run, for the table below
                    shutil.rmtree(bench.work / "recovery", ignore_errors=True)
                rig.py_spy(cmd, out / f"profile-{name}.{suffix}", fmt, rate=200, subprocesses=True)
                shutil.rmtree(bench.work / "recovery", ignore_errors=True)
            print(f"\n{name} ({out / f'profile-{name}.svg'}):")
            shares = rig.profile_shares(out / f"profile-{name}.txt", PARTS, idle=IDLE, rest="runtime and the rest")
            for part, share in shares.items():
                print(f"  {share * 100:5.1f}%  {part}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
