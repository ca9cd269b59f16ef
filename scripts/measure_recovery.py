"""Recovery time after a crash, on a generated log in a local broker.

    python scripts/measure_recovery.py [--events 1000000] [--kill-at 0.5]

Produces the log to a fresh topic, runs the flow with a recovery directory, kills
it with SIGKILL once the published positions pass --kill-at of the log, restarts
it, and reports the time from the restart until the published ranking covers the
whole log (caught up), next to an uninterrupted run's duration. Checks that the
recovered ranking equals the uninterrupted one.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import uuid
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rankflow.bench.listeners import ListenersRig  # noqa: E402
from rankflow.connectors.redis_read import read_latest  # noqa: E402


def progress(client: redis.Redis, ns: str) -> int:
    snap = read_latest(client, ns)
    return sum(snap["positions"].values()) if snap else 0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--users", type=int, default=100_000)
    p.add_argument("--songs", type=int, default=20_000)
    p.add_argument("--kill-at", type=float, default=0.5)
    a = p.parse_args()
    os.chdir(ROOT)  # the benchmarks' logs are kept in data/
    with ListenersRig() as bench:
        client = bench.client
        assert client is not None
        topic = f"events-{uuid.uuid4().hex[:6]}"
        bench.produce(bench.log_file(a.events, a.users, a.songs), topic, 4)

        def command(ns: str, recovery: str | None) -> list[str]:
            return bench.rankflow_cmd(topic, ns, "--until-eof", *(["--recovery-dir", recovery] if recovery else []))

        plain = bench.timed(command("plain", None), "plain").seconds
        with_recovery = bench.timed(command("recovering", str(bench.work / "rec-full")), "recovering").seconds
        proc = bench.start(command("crash", str(bench.work / "rec")), "crash")
        while progress(client, "crash") < a.kill_at * a.events:
            if proc.poll() is not None:
                raise SystemExit("finished before the kill point")
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        killed_at = progress(client, "crash")
        t = time.perf_counter()
        resumed = bench.start(command("crash", str(bench.work / "rec")), "resumed")
        while progress(client, "crash") < a.events:
            time.sleep(0.01)
        caught_up = time.perf_counter() - t
        resumed.wait()
        same = read_latest(client, "crash")["items"] == read_latest(client, "plain")["items"]
        print(f"{a.events} events, 4 partitions: uninterrupted run {plain:.1f}s without recovery, "
              f"{with_recovery:.1f}s with --recovery-dir; killed at {killed_at} events published; "
              f"restart to caught up: {caught_up:.1f}s; ranking equal to the uninterrupted run: {same}")
        return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
