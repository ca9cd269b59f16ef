"""``rankflow bench``: rankflow and the seed's first design on the same logs, side by side.

All in one run, on a local Redis and broker this command starts itself:

1. **Throughput** on a backlog: a generated log (with chaos) is produced to a
   topic; rankflow runs it to the end (``rankflow run --until-eof``, one process)
   and so does the baseline (``rankflow.bench.baseline``); both rankings must be
   equal (exact), and events/s are compared.
2. **Freshness** at a steady rate: events are produced at ``--rate`` per second for
   ``--steady-s`` seconds while each system runs live; for a sample of events,
   freshness is the time from the producer's send to the first published snapshot
   whose positions include it (rankflow) or to the moment its batch was applied in
   Redis (baseline).
3. **Memory** per counted user: a log in which ``--memory-users`` users each start
   one playback; rankflow's peak RSS above an empty run's, and Redis's
   ``used_memory`` growth for the baseline, each divided by the counted users.

It writes ``bench.json`` and ``bench.png`` to ``--out`` and prints a summary.
"""

from __future__ import annotations

import itertools
import json
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson
import redis

from rankflow.connectors.kafka import KafkaEndpoint, ensure_topic
from rankflow.connectors.redis_read import read_history, read_latest
from rankflow.generate import generate
from rankflow.produce import produce_file, produce_steady
from rankflow.services import LocalRedis, LocalTansu, free_port

TARGET_RATIO = 2.0
TARGET_FRESHNESS_P99_S = 1.0


@dataclass
class BenchConfig:
    events: int = 1_000_000
    users: int = 100_000
    songs: int = 20_000
    rate: int = 20_000
    steady_s: float = 30.0
    memory_users: int = 1_000_000
    partitions: int = 4
    out: str = "bench-results"
    seed: int = 1


@dataclass
class SystemResult:
    events_per_s: float = 0.0
    seconds: float = 0.0
    freshness_p50_s: float | None = None
    freshness_p99_s: float | None = None
    freshness_samples: int = 0
    memory_bytes_per_user: float | None = None


@dataclass
class BenchResult:
    config: dict[str, Any]
    machine: dict[str, Any]
    rankflow: SystemResult = field(default_factory=SystemResult)
    baseline: SystemResult = field(default_factory=SystemResult)
    exact: bool = False
    ratio: float = 0.0
    targets: dict[str, Any] = field(default_factory=dict)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


class Bench:
    def __init__(self, cfg: BenchConfig) -> None:
        self.cfg = cfg
        self.work = Path(tempfile.mkdtemp(prefix="rankflow-bench-"))
        self.redis = LocalRedis(free_port(), self.work / "redis")
        self.broker = LocalTansu(free_port(), self.work / "tansu")
        self.client: redis.Redis | None = None

    def log(self, message: str) -> None:
        print(f"[bench] {message}", file=sys.stderr, flush=True)

    # -- the two systems ----------------------------------------------------------
    def rankflow_cmd(self, topic: str, namespace: str, *extra: str) -> list[str]:
        return [sys.executable, "-m", "rankflow.cli", "run", "--input", f"kafka:{self.broker.url}/{topic}",
                "--redis", self.redis.url, "--namespace", namespace,
                "--dead-letter", f"jsonl:{self.work / (namespace + '.dead.jsonl')}", *extra]

    def baseline_cmd(self, topic: str, namespace: str, *extra: str) -> list[str]:
        return [sys.executable, "-m", "rankflow.bench.baseline", "--brokers", self.broker.url, "--topic", topic,
                "--redis", self.redis.url, "--namespace", namespace, *extra]

    def timed(self, cmd: list[str]) -> tuple[float, int]:
        """Run to completion; (seconds, peak RSS in bytes)."""
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:5])} failed: {proc.stderr.read().decode()[-2000:]}")
        return seconds, usage.ru_maxrss * 1024

    # -- 1. throughput ------------------------------------------------------------
    def throughput(self, result: BenchResult) -> None:
        cfg = self.cfg
        log = Path("data") / f"bench-{cfg.events}-{cfg.users}-{cfg.songs}.jsonl"
        if not log.exists():
            self.log(f"generating {log}")
            generate(cfg.users, cfg.songs, cfg.events, seed=cfg.seed, out=log)
        topic = "backlog"
        self.log(f"producing {cfg.events} events to {topic}")
        produce_file(str(log), KafkaEndpoint(self.broker.url, topic), cfg.partitions, progress=False)

        self.log("rankflow on the backlog")
        rf_s, _ = self.timed(self.rankflow_cmd(topic, "rf-backlog", "--until-eof"))
        self.log("baseline on the backlog")
        bl_s, _ = self.timed(self.baseline_cmd(topic, "bl-backlog"))
        assert self.client is not None
        rf_top = [(i["song_id"], i["listeners"]) for i in read_latest(self.client, "rf-backlog")["items"]]
        bl_top = [(s.decode(), int(c)) for s, c in
                  self.client.zrange("{bl-backlog}:songs", 0, len(rf_top) - 1, desc=True, withscores=True)]
        result.exact = rf_top == bl_top
        result.rankflow.seconds, result.baseline.seconds = rf_s, bl_s
        result.rankflow.events_per_s = cfg.events / rf_s
        result.baseline.events_per_s = cfg.events / bl_s
        result.ratio = result.rankflow.events_per_s / result.baseline.events_per_s
        self.log(f"rankflow {cfg.events / rf_s:,.0f}/s, baseline {cfg.events / bl_s:,.0f}/s, "
                 f"ratio {result.ratio:.2f}, rankings equal: {result.exact}")

    # -- 2. freshness -------------------------------------------------------------
    def steady_producer(self, topic: str, sample_every: int) -> dict[tuple[int, int], float]:
        """Produce at ``cfg.rate``/s for ``cfg.steady_s``; return sampled (partition, offset) -> send time."""
        cfg = self.cfg
        ensure_topic(self.broker.url, topic, cfg.partitions)
        return produce_steady(self.broker.url, topic, cfg.rate, cfg.users, cfg.songs, cfg.seed + 1,
                              count=int(cfg.rate * cfg.steady_s), sample_every=sample_every)

    def freshness(self, result: BenchResult) -> None:
        cfg = self.cfg
        sample_every = max(1, int(cfg.rate * cfg.steady_s) // 5000)
        assert self.client is not None
        # rankflow, live
        topic = "steady-rankflow"
        ensure_topic(self.broker.url, topic, cfg.partitions)
        self.log(f"rankflow live at {cfg.rate}/s for {cfg.steady_s:.0f}s")
        proc = subprocess.Popen(self.rankflow_cmd(topic, "rf-steady"), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        self._wait_first_snapshot("rf-steady", proc)
        sent = self.steady_producer(topic, sample_every)
        total = int(cfg.rate * cfg.steady_s)
        deadline = time.monotonic() + 120
        while self._published_position("rf-steady") < total and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        history = read_history(self.client, "rf-steady")
        latencies = []
        for (part, offset), at in sent.items():
            name = f"{topic}/{part}"
            seen = next((s["published_at"] / 1000 for s in history if s["positions"].get(name, 0) > offset), None)
            if seen is not None:
                latencies.append(seen - at)
        self._record_freshness(result.rankflow, latencies, len(sent))

        # baseline, live
        topic = "steady-baseline"
        ensure_topic(self.broker.url, topic, cfg.partitions)
        self.log(f"baseline live at {cfg.rate}/s for {cfg.steady_s:.0f}s")
        samples = self.work / "baseline-applied.json"
        proc = subprocess.Popen(self.baseline_cmd(topic, "bl-steady", "--follow", "--sample-every", "1",
                                                  "--samples-out", str(samples), "--expect", str(total)),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(1.0)
        sent = self.steady_producer(topic, sample_every)
        proc.wait(timeout=300)
        applied = {tuple(k): v for k, v in orjson.loads(samples.read_bytes())}
        latencies = [applied[key] - at for key, at in sent.items() if key in applied]
        self._record_freshness(result.baseline, latencies, len(sent))

    def _record_freshness(self, target: SystemResult, latencies: list[float], sampled: int) -> None:
        if latencies:
            target.freshness_p50_s = percentile(latencies, 0.5)
            target.freshness_p99_s = percentile(latencies, 0.99)
        target.freshness_samples = len(latencies)
        self.log(f"freshness p50 {target.freshness_p50_s}, p99 {target.freshness_p99_s} "
                 f"({len(latencies)} of {sampled} samples)")

    def _wait_first_snapshot(self, namespace: str, proc: subprocess.Popen) -> None:
        assert self.client is not None
        deadline = time.monotonic() + 60
        while read_latest(self.client, namespace) is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("rankflow did not start publishing")
            time.sleep(0.05)

    def _published_position(self, namespace: str) -> int:
        assert self.client is not None
        snap = read_latest(self.client, namespace)
        return sum(snap["positions"].values()) if snap else 0

    # -- 3. memory ----------------------------------------------------------------
    def memory(self, result: BenchResult) -> None:
        cfg = self.cfg
        log = self.work / "memory.jsonl"
        rng = random.Random(cfg.seed)
        songs = [f"song_{i}" for i in range(cfg.songs)]
        weights = list(itertools.accumulate(1.0 / r for r in range(1, cfg.songs + 1)))
        with open(log, "wb") as f:
            for u in range(cfg.memory_users):
                song = rng.choices(songs, cum_weights=weights)[0]
                f.write(orjson.dumps({"user_id": f"user_{u}", "playback_id": f"pb_{u}", "song_id": song,
                                      "type": "START", "version": 1, "ts": u}) + b"\n")
        empty = self.work / "empty.jsonl"
        empty.write_bytes(b'{"user_id":"u","playback_id":"p","song_id":"s","type":"START","version":1,"ts":1}\n')
        produce_file(str(log), KafkaEndpoint(self.broker.url, "memory"), cfg.partitions, progress=False)
        produce_file(str(empty), KafkaEndpoint(self.broker.url, "empty"), cfg.partitions, progress=False)
        self.log(f"memory with {cfg.memory_users} counted users")
        _, rss_empty = self.timed(self.rankflow_cmd("empty", "rf-empty", "--until-eof"))
        _, rss_full = self.timed(self.rankflow_cmd("memory", "rf-memory", "--until-eof"))
        self.log(f"peak RSS: empty run {rss_empty / 2**20:.0f} MiB, full run {rss_full / 2**20:.0f} MiB")
        assert self.client is not None
        counted = read_latest(self.client, "rf-memory")["counted_users"]
        result.rankflow.memory_bytes_per_user = (rss_full - rss_empty) / counted
        before = int(self.client.info("memory")["used_memory"])
        self.timed(self.baseline_cmd("memory", "bl-memory"))
        after = int(self.client.info("memory")["used_memory"])
        result.baseline.memory_bytes_per_user = (after - before) / counted
        self.log(f"bytes per counted user: rankflow {result.rankflow.memory_bytes_per_user:,.0f}, "
                 f"baseline (Redis) {result.baseline.memory_bytes_per_user:,.0f}")

    # -- all ----------------------------------------------------------------------
    def run(self) -> BenchResult:
        cfg = self.cfg
        result = BenchResult(config=asdict(cfg), machine={
            "cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()})
        self.redis.start()
        self.broker.start()
        self.client = redis.Redis.from_url(self.redis.url)
        try:
            self.throughput(result)
            self.freshness(result)
            self.memory(result)
        finally:
            self.client.close()
            self.broker.stop()
            self.redis.stop()
        p99 = result.rankflow.freshness_p99_s
        result.targets = {
            "throughput_ratio_min": TARGET_RATIO, "throughput_ratio_met": result.ratio >= TARGET_RATIO,
            "exact": result.exact,
            "freshness_p99_max_s": TARGET_FRESHNESS_P99_S,
            "freshness_p99_met": p99 is not None and p99 < TARGET_FRESHNESS_P99_S,
        }
        return result


def write_outputs(result: BenchResult, out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    json_path, png_path = out / "bench.json", out / "bench.png"
    json_path.write_text(json.dumps(asdict(result), indent=2) + "\n")
    chart(result, png_path)
    return json_path, png_path


def chart(result: BenchResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = ("rankflow", "baseline")
    colors = ("#2b7bba", "#b0b0b0")
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    eps = [getattr(result, s).events_per_s for s in systems]
    axes[0].bar(systems, eps, color=colors)
    axes[0].set_title(f"events/s on a {result.config['events']:,}-event backlog\n"
                      f"ratio {result.ratio:.2f} (target >= {TARGET_RATIO})")
    for i, v in enumerate(eps):
        axes[0].text(i, v, f"{v:,.0f}", ha="center", va="bottom")
    width = 0.38
    for j, (q, label) in enumerate((("freshness_p50_s", "p50"), ("freshness_p99_s", "p99"))):
        vals = [getattr(getattr(result, s), q) or 0 for s in systems]
        axes[1].bar([i + (j - 0.5) * width for i in range(2)], vals, width, label=label,
                    color=[c if j else c + "99" for c in colors], edgecolor="black")
    axes[1].axhline(TARGET_FRESHNESS_P99_S, color="red", linestyle="--", linewidth=1, label="p99 target")
    axes[1].set_xticks(range(2), systems)
    axes[1].set_ylabel("seconds")
    axes[1].set_title(f"freshness at {result.config['rate']:,} events/s\n(produced -> visible)")
    axes[1].legend()
    mem = [getattr(result, s).memory_bytes_per_user or 0 for s in systems]
    axes[2].bar(systems, mem, color=colors)
    axes[2].set_title(f"bytes per counted user\n({result.config['memory_users']:,} users)")
    for i, v in enumerate(mem):
        axes[2].text(i, v, f"{v:,.0f}", ha="center", va="bottom")
    fig.suptitle(f"rankflow vs the seed's first design (Redis Lua per event) — {result.machine['cpus']} CPUs")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(cfg: BenchConfig) -> BenchResult:
    result = Bench(cfg).run()
    json_path, png_path = write_outputs(result, Path(cfg.out))
    r, b = result.rankflow, result.baseline
    print(f"throughput: rankflow {r.events_per_s:,.0f} events/s, baseline {b.events_per_s:,.0f} events/s, "
          f"ratio {result.ratio:.2f} (target >= {TARGET_RATIO}); rankings equal: {result.exact}")
    print(f"freshness at {cfg.rate}/s: rankflow p50 {r.freshness_p50_s:.3f}s p99 {r.freshness_p99_s:.3f}s; "
          f"baseline p50 {b.freshness_p50_s:.3f}s p99 {b.freshness_p99_s:.3f}s (target p99 < 1s)")
    print(f"memory per counted user: rankflow {r.memory_bytes_per_user:,.0f} B, "
          f"baseline {b.memory_bytes_per_user:,.0f} B")
    print(f"wrote {json_path} and {png_path}")
    return result

