"""What recent plays cost the listener flow: one backlog, runs with and without them, alternating.

    .venv/bin/python scripts/bench_recent.py [--events 1000000] [--reps 3] [--durable]
        [--baseline-python OTHER_CHECKOUT/.venv/bin/python] [--event-rate PER_SECOND]

Produces the benchmark's log (``rankflow bench``'s, kept in ``data/``) to a topic of a
local broker (``rankflow.bench.listeners.ListenersRig``), then runs ``rankflow run --until-eof`` on it
with ``--recent-minutes 0`` and ``5`` (and, with ``--baseline-python``, another
checkout's rankflow, e.g. the commit before recent plays), round-robin and each variant
first in turn, so that drift of the machine hits every variant alike. Every run's listener ranking must equal the first
one's. Prints each run, and per variant the median events/s and the median and least
CPU seconds (on a shared machine the CPU seconds are the steadier measure); writes
``bench-results/recent.json``.

``--event-rate R`` first rewrites the log's event time to ``R`` events a second (each
``ts`` moved towards the first, order and lateness scaled alike). The generated log has
about 80 a second, so five minutes of window turn over every few thousand events; the
seed 000 design's million listeners send about 11,200 a second, a bucket leaving every
672,000 events. The window's churn is what the rate changes; the starts are the same.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import orjson

from rankflow.bench.listeners import ListenersRig


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--users", type=int, default=100_000)
    p.add_argument("--songs", type=int, default=20_000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--durable", action="store_true", help="with a fresh --recovery-dir per run")
    p.add_argument("--baseline-python", help="the interpreter of another checkout's venv: its rankflow too")
    p.add_argument("--event-rate", type=float, help="rewrite the log's event time to this many events a second")
    p.add_argument("--out", default="bench-results")
    args = p.parse_args()

    variants: dict[str, tuple[str, list[str]]] = {}
    if args.baseline_python:
        variants["baseline"] = (args.baseline_python, [])
    variants["recent_off"] = (sys.executable, ["--recent-minutes", "0"])
    variants["recent_5"] = (sys.executable, ["--recent-minutes", "5"])
    runs: dict[str, list[float]] = {name: [] for name in variants}
    with ListenersRig() as rig:
        log = rig.log_file(args.events, args.users, args.songs)
        if args.event_rate:
            log = at_rate(log, args.events, args.event_rate, rig.work / f"at-{args.event_rate:g}.jsonl")
        rig.produce(log, "backlog", args.partitions)
        first_top = None
        names = list(variants)
        for rep in range(args.reps):
            order = names[rep % len(names):] + names[:rep % len(names)]  # each variant first in turn
            for name in order:
                python, extra = variants[name]
                namespace = f"{name}-{rep}"
                cmd = rig.rankflow_cmd("backlog", namespace, "--until-eof", *extra)
                cmd[0:1] = [python, "-P"]  # not the working directory's rankflow: the interpreter's own
                if args.durable:
                    cmd += ["--recovery-dir", str(rig.work / f"{namespace}.recovery")]
                run = rig.timed(cmd, namespace)  # CPU seconds say what a variant costs on a shared machine
                seconds, cpu = run.seconds, run.cpu_s
                top = rig.top("rankflow", namespace, 100)
                first_top = first_top or top
                assert top == first_top, f"{name} ranked differently"
                runs[name].append((args.events / seconds, cpu))
                rig.log(f"rep {rep} {name}: {args.events / seconds:,.0f} events/s ({seconds:.2f} s, {cpu:.2f} CPU-s)")
    summary = {name: {"median_events_per_s": statistics.median(e for e, _ in r),
                      "median_cpu_s": statistics.median(c for _, c in r), "min_cpu_s": min(c for _, c in r),
                      "runs": [{"events_per_s": e, "cpu_s": c} for e, c in r]} for name, r in runs.items()}
    for name, s in summary.items():
        print(f"{name:>12}: median {s['median_events_per_s']:,.0f} events/s; CPU-s median {s['median_cpu_s']:.2f}, "
              f"min {s['min_cpu_s']:.2f}  ({', '.join(format(r['events_per_s'], ',.0f') for r in s['runs'])})")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "recent.json").write_text(json.dumps({"config": vars(args), "variants": summary}, indent=2))


def at_rate(path: Path, events: int, rate: float, out: Path) -> Path:
    """``path`` with every valid ``ts`` moved towards the first so that ``events`` span
    ``events / rate`` seconds; lines without an integer ``ts`` are kept as they are."""
    lines = path.read_bytes().splitlines()
    records = [_timed(line) for line in lines]
    stamps = [r["ts"] for r in records if r is not None]
    first, span_ms = min(stamps), max(stamps) - min(stamps)
    scale = events / rate * 1000 / span_ms
    with out.open("wb") as f:
        for line, record in zip(lines, records):
            if record is not None:
                record["ts"] = first + round((record["ts"] - first) * scale)
                line = orjson.dumps(record)
            f.write(line + b"\n")
    return out


def _timed(line: bytes) -> dict | None:
    """The line's record if it is an object with an integer ``ts``, else None."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return record if isinstance(record, dict) and type(record.get("ts")) is int else None


if __name__ == "__main__":
    main()
