"""Flow CPU seconds per 1M events with 1, 2 and 4 processes, two checkouts paired.

    .venv/bin/python scripts/bench_processes_ab.py --base OTHER/.venv/bin/rankflow --events 1000000 --reps 3

Starts its own Redis and broker (``bench.rig.Rig``), produces one generated log to a topic of
``--partitions`` partitions (``--flow listeners``: playback keyed by ``user_id``; ``--flow
boards``: score results keyed by ``player_id``, as ``rankflow produce --key-field`` does), then
runs the flow to the end of it with ``--processes N`` for every N of ``--processes``, in this
checkout and in ``--base``, ``--reps`` times, the two alternating which goes first. A run's CPU
is the user + system seconds of the whole process tree (the parent and every process it
started: ``wait4``), so the sum over processes, which does not depend on each having a core.
Prints one JSON line a run, then per system and N the median CPU-s per 1M events, its ratio to
the same system's one process, and the median of the reps' ratios this/base (paired: both ran
in the same minutes). Every run's final snapshot must equal the first one's (its items; for the
boards its positions, dead letters and every board no retention drops, :func:`lasting`).

``--pin``: every process of a run started on its own (``--addresses`` on 127.0.0.1, one
``--process-id`` each), pinned with ``taskset -c`` to core ``id % cores``: with as many cores as
processes, each process has a core to itself, as on a cluster of machines; with more processes
than cores the figure is what they cost sharing the cores they had. The run's CPU is then the
sum of the processes' own (each ``wait4``; each process's own is in the run's line, ``cpu_each_s``).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rankflow.bench.rig import Rig, timed  # noqa: E402
from rankflow.connectors.board_read import read_boards  # noqa: E402
from rankflow.connectors.redis_keys import boards_namespace  # noqa: E402
from rankflow.connectors.redis_read import read_latest  # noqa: E402


FLOWS = {"listeners": ("playback", "user_id"), "boards": ("scores", "player_id")}
"""The flow -> the log ``rankflow generate --kind`` makes for it, and the field its topic is keyed by."""


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def pinned(cmd: list[str], processes: int, rig: Rig, namespace: str) -> tuple[float, list[float]]:
    """``cmd`` as ``processes`` processes of one run, each pinned to its own core (modulo the
    cores): the wall seconds and each process's CPU seconds."""
    cores = os.cpu_count() or 1
    addresses = ",".join(f"127.0.0.1:{p}" for p in free_ports(processes))
    started = time.perf_counter()
    procs = []
    for i in range(processes):
        err = open(rig.stderr(f"{namespace}-{i}"), "wb")
        procs.append(subprocess.Popen(["taskset", "-c", str(i % cores), *cmd, "--addresses", addresses,
                                       "--process-id", str(i), "--run-id", namespace], stderr=err,
                                      stdout=subprocess.DEVNULL))
    cpu: list[float] = []
    for i, proc in enumerate(procs):
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise RuntimeError(f"process {i} exited {proc.returncode}: see {rig.stderr(f'{namespace}-{i}')}")
        cpu.append(usage.ru_utime + usage.ru_stime)
    return time.perf_counter() - started, cpu


def lasting(boards: dict[str, dict[str, Any]]) -> str:
    """The boards no period's retention drops (``all``, ``best``): whether a late result's period
    was dropped when it arrived depends on how the partitions' batches interleaved
    (docs/semantics/boards.md 7), which differs from run to run with any number of processes."""
    return repr({game: {b: e for b, e in per.items() if ":" not in b} for game, per in sorted(boards.items())})


def run_flow(rankflow: str, rig: Rig, topic: str, processes: int, extra: list[str], flow: str,
             pin: bool) -> dict[str, Any]:
    namespace = f"pab-{uuid.uuid4().hex[:8]}"
    cmd = [rankflow, "run", "--flow", flow, "--input", f"kafka:{rig.brokers}/{topic}", "--until-eof",
           "--redis", rig.redis_url, "--namespace", namespace,
           "--dead-letter", f"jsonl:{rig.work / (namespace + '.dead.jsonl')}", *extra]
    if pin:
        wall, each = pinned(cmd, processes, rig, namespace)
    else:
        run = timed([*cmd, "--processes", str(processes)], rig.stderr(namespace))
        wall, each = run.seconds, [run.cpu_s]
    assert rig.client is not None
    stored = namespace if flow == "listeners" else boards_namespace(namespace)
    final = read_latest(rig.client, stored) or {}
    same = final.get("items") if flow == "listeners" else \
        (sorted((final.get("positions") or {}).items()), final.get("dead_letters"), lasting(read_boards(rig.client, namespace)))
    for key in rig.client.scan_iter(match=f"{{{stored}}}*", count=1000):
        rig.client.unlink(key)
    return {"cpu_s": sum(each), "cpu_each_s": each, "wall_s": wall, "items": same}


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
    ap.add_argument("--base-extra", default="", help="more `rankflow run` options for the base only: with this "
                    "checkout's own rankflow as --base, two settings of one checkout (e.g. --barrier-ms 250)")
    ap.add_argument("--flow", choices=sorted(FLOWS), default="listeners")
    ap.add_argument("--players", type=int, default=100_000, help="--flow boards: players")
    ap.add_argument("--pin", action="store_true", help="each process on its own core (taskset), see above")
    args = ap.parse_args()
    counts = [int(x) for x in args.processes.split(",")]
    systems = {"new": str(Path(sys.executable).parent / "rankflow"), "base": args.base}
    extra = {"new": args.extra.split(), "base": args.extra.split() + args.base_extra.split()}
    with Rig() as rig:
        log = rig.work / "events.jsonl"
        kind, key_field = FLOWS[args.flow]
        sizes = ["--users", str(args.users), "--songs", str(args.songs)] if kind == "playback" else \
            ["--players", str(args.players)]
        subprocess.run([systems["new"], "generate", "--kind", kind, *sizes, "--events", str(args.events),
                        "--seed", "1", "--out", str(log)], check=True)
        rig.produce(log, "events", args.partitions, key_field=key_field)
        results: dict[tuple[str, int], list[float]] = {}
        ratios: dict[int, list[float]] = {n: [] for n in counts}
        first_items = None
        for rep in range(args.reps):
            for n in counts:
                order = ["new", "base"] if (rep + n) % 2 == 0 else ["base", "new"]
                pair = {}
                for name in order:
                    r = run_flow(systems[name], rig, "events", n, extra[name], args.flow, args.pin)
                    if first_items is None:
                        first_items = r["items"]
                    exact = r["items"] == first_items and r["items"] is not None
                    per_m = r["cpu_s"] * 1e6 / args.events
                    print(json.dumps({"rep": rep, "system": name, "processes": n, "cpu_s_per_1m": round(per_m, 3),
                                      "wall_s": round(r["wall_s"], 2), "exact": exact,
                                      "cpu_each_s": [round(c, 2) for c in r["cpu_each_s"]]}), flush=True)
                    if not exact:
                        sys.exit(f"{name} --processes {n}: the final snapshot differs from the first run's")
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
