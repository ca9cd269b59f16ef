"""Flow CPU seconds per 1M events with 1, 2 and 4 processes, two checkouts paired.

    .venv/bin/python scripts/bench_processes_ab.py --base OTHER/.venv/bin/rankflow --events 1000000 --reps 3

Starts its own Redis and broker (``bench.rig.Rig``), produces one playback log to a topic of
``--partitions`` partitions (keyed by ``user_id``, as ``rankflow produce`` does), then runs the
listener flow to the end of it with ``--processes N`` for every N of ``--processes``, in this
checkout and in ``--base``, ``--reps`` times, the two alternating which goes first. A run's CPU
is the user + system seconds of the whole process tree (the parent and every process it
started: ``wait4``), so the sum over processes, which does not depend on each having a core.
Prints one JSON line a run, then per system and N the median CPU-s per 1M events, its ratio to
the same system's one process, and the median of the reps' ratios this/base (paired: both ran
in the same minutes). Every run's final ranking must equal the first one's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rankflow.bench.rig import Rig, timed  # noqa: E402
from rankflow.connectors.redis_read import read_latest  # noqa: E402


def run_flow(rankflow: str, rig: Rig, topic: str, processes: int, extra: list[str]) -> dict[str, Any]:
    namespace = f"pab-{uuid.uuid4().hex[:8]}"
    cmd = [rankflow, "run", "--input", f"kafka:{rig.brokers}/{topic}", "--until-eof",
           "--redis", rig.redis_url, "--namespace", namespace, "--processes", str(processes),
           "--dead-letter", f"jsonl:{rig.work / (namespace + '.dead.jsonl')}", *extra]
    run = timed(cmd, rig.stderr(namespace))
    assert rig.client is not None
    final = read_latest(rig.client, namespace) or {}
    for key in rig.client.scan_iter(match=f"{{{namespace}}}*", count=1000):
        rig.client.unlink(key)
    return {"cpu_s": run.cpu_s, "wall_s": run.seconds, "items": final.get("items")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the other checkout's command (its .venv/bin/rankflow; not `python -m`, which would "
                    "import this checkout's folders from the working directory)")
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--users", type=int, default=100_000)
    ap.add_argument("--songs", type=int, default=20_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--processes", default="1,2,4", help="process counts (default: %(default)s)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--extra", default="", help="more `rankflow run` options, for both systems")
    args = ap.parse_args()
    counts = [int(x) for x in args.processes.split(",")]
    systems = {"new": str(Path(sys.executable).parent / "rankflow"), "base": args.base}
    extra = args.extra.split()
    with Rig() as rig:
        log = rig.work / "events.jsonl"
        subprocess.run([systems["new"], "generate", "--users", str(args.users), "--songs",
                        str(args.songs), "--events", str(args.events), "--seed", "1", "--out", str(log)], check=True)
        rig.produce(log, "events", args.partitions)
        results: dict[tuple[str, int], list[float]] = {}
        ratios: dict[int, list[float]] = {n: [] for n in counts}
        first_items = None
        for rep in range(args.reps):
            for n in counts:
                order = ["new", "base"] if (rep + n) % 2 == 0 else ["base", "new"]
                pair = {}
                for name in order:
                    r = run_flow(systems[name], rig, "events", n, extra)
                    if first_items is None:
                        first_items = r["items"]
                    exact = r["items"] == first_items and r["items"] is not None
                    per_m = r["cpu_s"] * 1e6 / args.events
                    print(json.dumps({"rep": rep, "system": name, "processes": n, "cpu_s_per_1m": round(per_m, 3),
                                      "wall_s": round(r["wall_s"], 2), "exact": exact}), flush=True)
                    if not exact:
                        sys.exit(f"{name} --processes {n}: the final ranking differs from the first run's")
                    results.setdefault((name, n), []).append(per_m)
                    pair[name] = per_m
                ratios[n].append(pair["new"] / pair["base"])
        for name in systems:
            one = statistics.median(results[(name, counts[0])])
            for n in counts:
                vals = results[(name, n)]
                med = statistics.median(vals)
                print(f"{name:4} --processes {n}: {med:.2f} CPU-s per 1M events (range {min(vals):.2f}-"
                      f"{max(vals):.2f}), x{med / one:.2f} of {counts[0]} process(es)")
        for n in counts:
            print(f"--processes {n}: new/base paired, median x{statistics.median(ratios[n]):.3f} "
                  f"({', '.join(f'{r:.3f}' for r in ratios[n])})")


if __name__ == "__main__":
    main()
