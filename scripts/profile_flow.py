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
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rankflow.bench.rig import Rig  # noqa: E402

CONFIGS = {
    "one-process": [],
    "one-process-durable": ["--recovery-dir", "{work}/recovery"],
    "two-processes": ["--processes", "2"],
}
PARTS = {  # a frame whose name contains the key counts for the part (first match wins, innermost frame first)
    "parse (JSON, validation)": ("parse_records", "orjson"),
    "user stage (rules)": ("_apply", "apply_event"),
    "changelog (write, fdatasync)": ("ShardChangelog", "fdatasync"),
    "net deltas, routing": ("combine_song_deltas", "ShardRouter", "barrier_ticks"),
    "song counters": ("SongCounterLogic", "RetractableIndex", "SortedList"),
    "Kafka read": ("_KafkaPartition", "rd_kafka"),
    "exchange between processes (pickle, bincode)": ("pickle", "bincode", "Pickler", "Unpickler"),
    "Bytewax recovery store (SQLite)": ("sqlite", "rusqlite"),
    "merger, publish": ("MergerLogic", "Publisher", "redis/"),
    "start-up (imports)": ("_find_and_load", "_compile_bytecode"),
}


IDLE = ("Condition.wait", "Queue.get")  # a thread waiting for work (the publisher): py-spy --native counts it


def shares(collapsed: Path) -> dict[str, float]:
    counts: Counter[str] = Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        frames = [f for f in stack.split(";")[::-1] if not f.startswith("process ")]  # py-spy's root: a command line
        if any(idle in f for f in frames for idle in IDLE):
            continue
        total += int(n)
        part = next((name for frame in frames for name, keys in PARTS.items() if any(k in frame for k in keys)),
                    "runtime and the rest")
        counts[part] += int(n)
    return {part: n / total for part, n in counts.most_common()}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--users", type=int, default=100_000)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--out", default="bench-results")
    a = p.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    with Rig() as rig:
        topic = "profile"
        rig.produce(rig.log_file(a.events, a.users, 20_000), topic, a.partitions)
        for name, extra in CONFIGS.items():
            cmd = rig.rankflow_cmd(topic, name, "--until-eof", *(x.format(work=rig.work) for x in extra))
            for fmt, suffix in (("flamegraph", "svg"), ("raw", "txt")):
                if fmt == "raw":  # the collapsed stacks of a second run, for the table below
                    shutil.rmtree(rig.work / "recovery", ignore_errors=True)
                subprocess.run([spy, "record", "--native", "--subprocesses", "-r", "200", "-f", fmt,
                                "-o", str(out / f"profile-{name}.{suffix}"), "--", *cmd],
                               check=True, capture_output=True)
                shutil.rmtree(rig.work / "recovery", ignore_errors=True)
            print(f"\n{name} ({out / f'profile-{name}.svg'}):")
            for part, share in shares(out / f"profile-{name}.txt").items():
                print(f"  {share * 100:5.1f}%  {part}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
