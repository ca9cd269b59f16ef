"""``make bench-api``: latency and throughput of the reader API while the flow publishes.

Starts Redis, a live flow fed with steady playback traffic, and ``rankflow serve``;
then loads ``GET /rankings?k=100`` and ``GET /songs/{id}`` at a fixed
rate (open loop, default 1000 requests/s for 10 s each) and, if ``wrk`` is installed,
measures the most requests/s the service sustains. Writes bench-results/api.json.

    python scripts/bench_api.py [--rate 1000] [--seconds 10] [--traffic 2000] [--via-kafka]

The traffic goes to a JSON Lines file that the flow follows. ``--via-kafka`` sends it
through the local broker instead; that broker (Tansu) uses about a whole core when it
is consumed live, even at 2,000 events/s, and on 2 cores the load generator and the
service then wait for the CPU: the latencies measure the broker, not the service.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import shutil
import subprocess
import sys
import multiprocessing
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rankflow.connectors.kafka import ensure_topic  # noqa: E402
from rankflow.bench.api_load import run_load  # noqa: E402
from rankflow.produce import append_steady, produce_steady  # noqa: E402
from rankflow.services import LocalRedis, LocalTansu, free_port, stop_processes  # noqa: E402


def server_p99_ms(base: str, route: str, before: dict[float, float]) -> tuple[float, dict[float, float]]:
    """The service's own p99 for ``route`` since ``before`` (a bucket bound, from /metrics)."""
    from prometheus_client.parser import text_string_to_metric_families

    buckets: dict[float, float] = {}
    for family in text_string_to_metric_families(httpx.get(base + "/metrics").text):
        for s in family.samples:
            if s.name == "rankflow_api_request_seconds_bucket" and s.labels.get("route") == route:
                buckets[float(s.labels["le"])] = s.value
    delta = {le: n - before.get(le, 0) for le, n in buckets.items()}
    total = delta.get(float("inf"), 0)
    bound = next((le for le, n in sorted(delta.items()) if total and n >= 0.99 * total), float("nan"))
    return bound * 1000, buckets


def wrk(url: str, seconds: int) -> dict[str, float] | None:
    if shutil.which("wrk") is None:
        return None
    out = subprocess.run(["wrk", "-t2", "-c32", f"-d{seconds}s", "--latency", url],
                         capture_output=True, text=True).stdout
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}
    return {"max_rps": float(rps.group(1)) if rps else float("nan"),
            "p99_ms_at_max": float(p99.group(1)) * scale[p99.group(2)] if p99 else float("nan")}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rate", type=int, default=1000)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--traffic", type=int, default=2000, help="playback events/s while loading")
    p.add_argument("--via-kafka", action="store_true", help="traffic through the local broker")
    p.add_argument("--out", default=str(ROOT / "bench-results"))
    a = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rankflow-api-bench-"))
    rds = LocalRedis(free_port(), work / "redis").start()
    broker = LocalTansu(free_port(), work / "tansu").start() if a.via_kafka else None
    port, topic, procs = free_port(), "events", []
    stop = multiprocessing.get_context("spawn").Event()
    try:
        if broker is not None:
            ensure_topic(broker.url, topic, 4)
            source = f"kafka:{broker.url}/{topic}"
            feed = (produce_steady, (broker.url, topic, a.traffic, 50_000, 5_000, 3, stop))
        else:
            log = work / "events.jsonl"
            log.touch()
            source = f"jsonl:{log}"
            feed = (append_steady, (str(log), a.traffic, 50_000, 5_000, 3, stop))
        procs.append(subprocess.Popen([sys.executable, "-m", "rankflow.cli", "run", "--input", source,
                                       "--redis", rds.url, "--dead-letter", f"jsonl:{work / 'dl.jsonl'}"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        procs.append(subprocess.Popen([sys.executable, "-m", "rankflow.cli", "serve", "--port", str(port),
                                       "--redis", rds.url], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        # Its own process: in this one it would steal the load generator's time and
        # its stalls would be charged to the server.
        feeder = multiprocessing.get_context("spawn").Process(target=feed[0], args=feed[1], daemon=True)
        feeder.start()
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                top = httpx.get(f"{base}/rankings?k=100").json()
                if len(top.get("items", [])) >= 50:
                    break
            except (httpx.HTTPError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the flow and the service did not come up")
            time.sleep(0.2)
        # Songs of the top 100 (answered from the cached snapshot) and songs anywhere else in
        # the catalogue (from Redis's full count table, or 404 when nobody listens).
        in_top = [it["song_id"] for it in top["items"]]
        elsewhere = [f"song_{i}" for i in range(0, 5_000, 7) if f"song_{i}" not in set(in_top)]
        rng = random.Random(1)
        results = {"rate": a.rate, "seconds": a.seconds, "traffic_events_per_s": a.traffic,
                   "traffic_via": "kafka" if broker is not None else "jsonl"}
        buckets: dict[str, dict[float, float]] = {"/rankings": {}, "/songs/{song_id}": {}}
        for name, route, path_for in (
                ("rankings_k100", "/rankings", lambda i: "/rankings?k=100"),
                ("song_in_top", "/songs/{song_id}", lambda i: f"/songs/{rng.choice(in_top)}"),
                ("song_elsewhere", "/songs/{song_id}", lambda i: f"/songs/{rng.choice(elsewhere)}")):
            r = asyncio.run(run_load("127.0.0.1", port, path_for, a.rate, a.seconds))
            server_p99, buckets[route] = server_p99_ms(base, route, buckets[route])
            results[name] = {**r.summary(), "statuses": r.statuses, "server_p99_ms_at_most": server_p99}
            print(f"{name}: {r.summary()['rps']:.0f} req/s, p50 {r.summary()['p50_ms']:.2f} ms, "
                  f"p99 {r.summary()['p99_ms']:.2f} ms (in the service: p99 <= {server_p99:g} ms), "
                  f"errors {r.errors}, statuses {r.statuses}")
        for name, path in (("rankings_k100", "/rankings?k=100"), ("song_in_top", f"/songs/{in_top[0]}")):
            measured = wrk(base + path, 10)
            if measured is not None:
                results[name]["wrk"] = measured
                print(f"{name} (wrk -t2 -c32, max): {measured['max_rps']:.0f} req/s, "
                      f"p99 {measured['p99_ms_at_max']:.2f} ms")
        print(" ".join(line for line in httpx.get(base + "/metrics").text.splitlines()
                       if line.startswith("rankflow_api_table_")))
        Path(a.out).mkdir(parents=True, exist_ok=True)
        (Path(a.out) / "api.json").write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {Path(a.out) / 'api.json'}")
    finally:
        stop.set()
        stop_processes(procs)
        if broker is not None:
            broker.stop()
        rds.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
