"""Time `rankflow run` on a generated 1M-event log (issue 2's figure).

Usage: python scripts/bench_run.py [--events N] [--users N] [--songs N] [--workers N]
Starts its own Redis on a spare port, generates the log once into data/, runs the flow
until EOF, checks the invariant, and prints events/s.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rankflow.generate import generate  # noqa: E402
from rankflow.runner import RunOptions, run  # noqa: E402
from rankflow.services import LocalRedis, free_port  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--users", type=int, default=100_000)
    p.add_argument("--songs", type=int, default=20_000)
    p.add_argument("--workers", type=int, default=1)
    a = p.parse_args()
    log = ROOT / "data" / f"bench-{a.events}-{a.users}-{a.songs}.jsonl"
    if not log.exists():
        t = time.perf_counter()
        generate(a.users, a.songs, a.events, seed=1, out=log)
        print(f"generated {log} in {time.perf_counter() - t:.1f}s")
    service = LocalRedis(free_port(), ROOT / ".local" / "bench-redis").start()
    try:
        opts = RunOptions(input=f"jsonl:{log}", until_eof=True, redis_url=service.url, namespace=f"bench-{os.getpid()}",
                          dead_letter=f"jsonl:{ROOT / 'data' / 'bench-dead-letters.jsonl'}", workers=a.workers)
        t = time.perf_counter()
        final = run(opts)
        took = time.perf_counter() - t
    finally:
        service.stop()
    assert final is not None and final["total_listeners"] == final["counted_users"]
    print(f"rankflow run: {a.events} events in {took:.2f}s = {a.events / took:,.0f} events/s "
          f"(workers={a.workers}, {final['total_listeners']} listeners, {final['dead_letters']} dead letters)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
