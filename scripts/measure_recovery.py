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
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rankflow.connectors.kafka import KafkaEndpoint  # noqa: E402
from rankflow.connectors.redis_read import read_latest  # noqa: E402
from rankflow.generate import generate  # noqa: E402
from rankflow.produce import produce_file  # noqa: E402
from rankflow.services import LocalRedis, LocalTansu, free_port  # noqa: E402


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
    work = Path(tempfile.mkdtemp(prefix="rankflow-recovery-"))
    log = ROOT / "data" / f"bench-{a.events}-{a.users}-{a.songs}.jsonl"
    if not log.exists():
        generate(a.users, a.songs, a.events, seed=1, out=log)
    rds = LocalRedis(free_port(), work / "redis").start()
    broker = LocalTansu(free_port(), work / "tansu").start()
    client = redis.Redis.from_url(rds.url)
    try:
        topic = f"events-{uuid.uuid4().hex[:6]}"
        produce_file(str(log), KafkaEndpoint(broker.url, topic), partitions=4, progress=False)

        def command(ns: str, recovery: str | None) -> list[str]:
            cmd = [sys.executable, "-m", "rankflow.cli", "run", "--input", f"kafka:{broker.url}/{topic}",
                   "--until-eof", "--redis", rds.url, "--namespace", ns, "--dead-letter", f"jsonl:{work / ns}.dl"]
            return cmd + (["--recovery-dir", recovery] if recovery else [])

        t = time.perf_counter()
        subprocess.run(command("plain", None), check=True, capture_output=True)
        plain = time.perf_counter() - t
        t = time.perf_counter()
        subprocess.run(command("recovering", str(work / "rec-full")), check=True, capture_output=True)
        with_recovery = time.perf_counter() - t

        proc = subprocess.Popen(command("crash", str(work / "rec")), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        while progress(client, "crash") < a.kill_at * a.events:
            if proc.poll() is not None:
                raise SystemExit("finished before the kill point")
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        killed_at = progress(client, "crash")
        t = time.perf_counter()
        resumed = subprocess.Popen(command("crash", str(work / "rec")), stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        while progress(client, "crash") < a.events:
            time.sleep(0.01)
        caught_up = time.perf_counter() - t
        resumed.wait()
        same = read_latest(client, "crash")["items"] == read_latest(client, "plain")["items"]
        print(f"{a.events} events, 4 partitions: uninterrupted run {plain:.1f}s without recovery, "
              f"{with_recovery:.1f}s with --recovery-dir; killed at {killed_at} events published; "
              f"restart to caught up: {caught_up:.1f}s; ranking equal to the uninterrupted run: {same}")
        return 0 if same else 1
    finally:
        client.close()
        broker.stop()
        rds.stop()


if __name__ == "__main__":
    sys.exit(main())
