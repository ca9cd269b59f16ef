"""What following the flows costs `rankflow serve`, and how soon it shows a new snapshot.

    .venv/bin/python scripts/bench_serve_follow.py [--base OTHER_CHECKOUT/.venv/bin/rankflow] [--reps 2]

For this checkout's ``rankflow`` (and ``--base``'s, alternated, each first in turn), on a
Redis of its own:

* **idle**: ``rankflow serve --board-index memory`` (every product's readers) with nothing
  published and no requests, for ``--idle-s``: its CPU (ms per second, from
  ``/proc/PID/stat``) and the Redis commands per second it causes;
* **publish to answer**: ``--products listeners``; ``--snapshots`` listener snapshots
  published 100-300 ms apart (random, so that no poll interval locks in phase), each
  followed by ``GET /rankings?k=1`` every millisecond until it names the new snapshot: the
  delay's median, 90th percentile and maximum.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import redis

from rankflow.bench.rig import cpu_seconds
from rankflow.connectors.redis_generations import join_run
from rankflow.connectors.redis_listeners import CountTable
from rankflow.connectors.redis_publish import Publisher
from rankflow.services import LocalRedis, free_port
from rankflow.state.snapshot import Snapshot, snapshot_id


def serve(rankflow: str, url: str, ns: str, *extra: str) -> tuple[subprocess.Popen[bytes], httpx.Client]:
    port = free_port()
    server = subprocess.Popen([rankflow, "serve", "--port", str(port), "--redis", url, "--namespace", ns, *extra],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}")
    while True:
        try:
            client.get("/health")
            return server, client
        except httpx.HTTPError:
            assert server.poll() is None, "serve exited"
            time.sleep(0.05)


def idle(rankflow: str, url: str, seconds: float) -> tuple[float, float]:
    """(ms of CPU per s, Redis commands per s) of an idle server."""
    r = redis.Redis.from_url(url)
    server, client = serve(rankflow, url, "idle-" + uuid.uuid4().hex[:6], "--board-index", "memory")
    time.sleep(2)  # start-up done
    cpu0, cmds0, t0 = cpu_seconds(server.pid), r.info("stats")["total_commands_processed"], time.monotonic()
    time.sleep(seconds)
    cpu1, cmds1, t1 = cpu_seconds(server.pid), r.info("stats")["total_commands_processed"], time.monotonic()
    server.terminate()
    server.wait()
    client.close()
    return (cpu1 - cpu0) / (t1 - t0) * 1000, (cmds1 - cmds0 - 2) / (t1 - t0)  # less the two INFO calls


def freshness(rankflow: str, url: str, snapshots: int, rng: random.Random) -> list[float]:
    """Publish-to-answer delays (ms) of ``snapshots`` listener snapshots."""
    ns = "fresh-" + uuid.uuid4().hex[:6]
    token = join_run(redis.Redis.from_url(url), ns, ns)[0]
    publisher = Publisher(url, ns, token, state=CountTable())

    def snap(epoch: int) -> Snapshot:
        return Snapshot(snapshot_id(token, epoch), token, epoch, {"f": epoch}, 1, 1, 1, 0, 10, [("a", epoch)], {},
                        [], [], {"a": epoch}, epoch == 1)

    publisher.publish(snap(1))
    server, client = serve(rankflow, url, ns, "--products", "listeners")
    while client.get("/rankings?k=1").status_code != 200:
        time.sleep(0.01)
    delays = []
    for epoch in range(2, snapshots + 2):
        time.sleep(rng.uniform(0.1, 0.3))
        publisher.publish(snap(epoch))
        started, want = time.perf_counter(), snapshot_id(token, epoch)
        while client.get("/rankings?k=1").json().get("snapshot_id") != want:
            time.sleep(0.001)
        delays.append((time.perf_counter() - started) * 1000)
    server.terminate()
    server.wait()
    client.close()
    return sorted(delays)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", help="another checkout's rankflow, measured alternately with this one's")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--idle-s", type=float, default=20.0)
    p.add_argument("--snapshots", type=int, default=60)
    args = p.parse_args()
    systems = {"this": str(Path(__file__).resolve().parents[1] / ".venv/bin/rankflow")}
    if args.base:
        systems["base"] = args.base
    rng = random.Random(1)
    with tempfile.TemporaryDirectory() as tmp:
        local = LocalRedis(free_port(), Path(tmp)).start()
        try:
            names = list(systems)
            for rep in range(args.reps):
                for name in names[rep % len(names):] + names[:rep % len(names)]:
                    cpu_ms, cmds = idle(systems[name], local.url, args.idle_s)
                    d = freshness(systems[name], local.url, args.snapshots, rng)
                    print(f"rep {rep} {name}: idle {cpu_ms:.1f} ms/s CPU, {cmds:.0f} Redis commands/s; publish to "
                          f"answer median {statistics.median(d):.1f} ms, p90 {d[int(0.9 * len(d))]:.1f}, "
                          f"max {d[-1]:.1f}")
        finally:
            local.stop()


if __name__ == "__main__":
    main()
