"""``rankflow bench``: rankflow and the seed's first design on the same logs, side by side.

All in one run, on a local Redis and broker this command starts itself
(:class:`rankflow.bench.rig.Rig`):

1. **Throughput** on a backlog: a generated log (with chaos) is produced to a
   topic; each system runs it to the end as its own process: rankflow
   (``rankflow run --until-eof``), rankflow durable (the same with
   ``--recovery-dir``, what production runs), and the baseline in its full and lean
   forms (``rankflow.bench.baseline``). All rankings must be equal (exact). The
   ratios that count are against the lean baseline, the strongest form of the old
   design.
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
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from rankflow.bench.rig import SYSTEMS, Rig
from rankflow.connectors.kafka import KafkaEndpoint, ensure_topic
from rankflow.connectors.redis_read import read_history, read_latest
from rankflow.produce import produce_file, produce_steady

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
    parts: tuple[str, ...] = ("throughput", "freshness", "memory")
    recent_minutes: int | None = None  # rankflow runs with --recent-minutes N (None: the default)


@dataclass
class SystemResult:
    events_per_s: float = 0.0
    seconds: float = 0.0
    broker_cpu_s: float = 0.0  # CPU the broker spent while this system read the backlog
    redis_cpu_s: float = 0.0
    freshness_p50_s: float | None = None
    freshness_p99_s: float | None = None
    freshness_samples: int = 0
    memory_bytes_per_user: float | None = None


@dataclass
class BenchResult:
    config: dict[str, Any]
    machine: dict[str, Any]
    rankflow: SystemResult = field(default_factory=SystemResult)
    rankflow_durable: SystemResult = field(default_factory=SystemResult)
    rankflow_2p: SystemResult = field(default_factory=SystemResult)  # --processes 2
    rankflow_durable_2p: SystemResult = field(default_factory=SystemResult)
    baseline: SystemResult = field(default_factory=SystemResult)
    baseline_lean: SystemResult = field(default_factory=SystemResult)
    exact: bool = False
    ratio: float = 0.0  # rankflow / lean baseline
    durable_ratio: float = 0.0  # rankflow durable / lean baseline
    ratio_full: float = 0.0  # rankflow / full baseline
    processes_speedup: float = 0.0  # --processes 2 / one process
    durable_processes_speedup: float = 0.0
    targets: dict[str, Any] = field(default_factory=dict)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


class Bench:
    def __init__(self, cfg: BenchConfig) -> None:
        self.cfg = cfg
        self.rig = Rig(cfg.seed)
        if cfg.recent_minutes is not None:
            self.rig.rankflow_extra = ["--recent-minutes", str(cfg.recent_minutes)]
        self.work = self.rig.work
        self.client = None

    def log(self, message: str) -> None:
        self.rig.log(message)

    # -- 1. throughput ------------------------------------------------------------
    def throughput(self, result: BenchResult) -> None:
        cfg = self.cfg
        topic = "backlog"
        self.rig.produce(self.rig.log_file(cfg.events, cfg.users, cfg.songs), topic, cfg.partitions)
        runs = {system: self.rig.backlog(system, topic, cfg.events) for system in SYSTEMS}
        for system, run in runs.items():
            target: SystemResult = getattr(result, system)
            target.seconds, target.events_per_s = run.seconds, run.events_per_s
            target.broker_cpu_s, target.redis_cpu_s = run.broker_cpu_s, run.redis_cpu_s
        result.exact = all(run.top == runs["rankflow"].top for run in runs.values())
        lean = runs["baseline_lean"].events_per_s
        result.ratio = runs["rankflow"].events_per_s / lean
        result.durable_ratio = runs["rankflow_durable"].events_per_s / lean
        result.ratio_full = runs["rankflow"].events_per_s / runs["baseline"].events_per_s
        result.processes_speedup = runs["rankflow_2p"].events_per_s / runs["rankflow"].events_per_s
        result.durable_processes_speedup = runs["rankflow_durable_2p"].events_per_s / runs["rankflow_durable"].events_per_s
        self.log(f"vs the lean baseline: rankflow {result.ratio:.2f}, durable {result.durable_ratio:.2f}; "
                 f"vs the full one {result.ratio_full:.2f}; rankings equal: {result.exact}")

    # -- 2. freshness -------------------------------------------------------------
    def steady_producer(self, topic: str, sample_every: int) -> dict[tuple[int, int], float]:
        """Produce at ``cfg.rate``/s for ``cfg.steady_s``; return sampled (partition, offset) -> send time."""
        cfg = self.cfg
        ensure_topic(self.rig.broker.url, topic, cfg.partitions)
        return produce_steady(self.rig.broker.url, topic, cfg.rate, cfg.users, cfg.songs, cfg.seed + 1,
                              count=int(cfg.rate * cfg.steady_s), sample_every=sample_every)

    def freshness(self, result: BenchResult) -> None:
        cfg = self.cfg
        sample_every = max(1, int(cfg.rate * cfg.steady_s) // 5000)
        assert self.client is not None
        # rankflow, live
        topic = "steady-rankflow"
        ensure_topic(self.rig.broker.url, topic, cfg.partitions)
        self.log(f"rankflow live at {cfg.rate}/s for {cfg.steady_s:.0f}s")
        proc = subprocess.Popen(self.rig.rankflow_cmd(topic, "rf-steady"), stdout=subprocess.DEVNULL,
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
        ensure_topic(self.rig.broker.url, topic, cfg.partitions)
        self.log(f"baseline live at {cfg.rate}/s for {cfg.steady_s:.0f}s")
        samples = self.work / "baseline-applied.json"
        proc = subprocess.Popen(self.rig.baseline_cmd(topic, "bl-steady", "--follow", "--sample-every", "1",
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
        produce_file(str(log), KafkaEndpoint(self.rig.broker.url, "memory"), cfg.partitions, progress=False)
        produce_file(str(empty), KafkaEndpoint(self.rig.broker.url, "empty"), cfg.partitions, progress=False)
        self.log(f"memory with {cfg.memory_users} counted users")
        _, rss_empty = self.rig.timed(self.rig.rankflow_cmd("empty", "rf-empty", "--until-eof"))
        _, rss_full = self.rig.timed(self.rig.rankflow_cmd("memory", "rf-memory", "--until-eof"))
        self.log(f"peak RSS: empty run {rss_empty / 2**20:.0f} MiB, full run {rss_full / 2**20:.0f} MiB")
        assert self.client is not None
        counted = read_latest(self.client, "rf-memory")["counted_users"]
        result.rankflow.memory_bytes_per_user = (rss_full - rss_empty) / counted
        before = int(self.client.info("memory")["used_memory"])
        self.rig.timed(self.rig.baseline_cmd("memory", "bl-memory"))
        after = int(self.client.info("memory")["used_memory"])
        result.baseline.memory_bytes_per_user = (after - before) / counted
        self.log(f"bytes per counted user: rankflow {result.rankflow.memory_bytes_per_user:,.0f}, "
                 f"baseline (Redis) {result.baseline.memory_bytes_per_user:,.0f}")

    # -- all ----------------------------------------------------------------------
    def run(self) -> BenchResult:
        cfg = self.cfg
        result = BenchResult(config=asdict(cfg), machine={
            "cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()})
        with self.rig:
            self.client = self.rig.client
            for part in cfg.parts:
                getattr(self, part)(result)
        p99 = result.rankflow.freshness_p99_s
        result.targets = {
            "throughput_ratio_min": TARGET_RATIO, "throughput_ratio_met": result.ratio >= TARGET_RATIO,
            "durable_ratio_met": result.durable_ratio >= TARGET_RATIO,
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
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    backlog = ("rankflow", "rankflow_durable", "rankflow_2p", "rankflow_durable_2p", "baseline_lean", "baseline")
    eps = [getattr(result, s).events_per_s for s in backlog]
    axes[0].bar(["rf", "rf\ndurable", "rf\n2 proc.", "rf dur.\n2 proc.", "baseline\nlean", "baseline\nfull"], eps,
                color=("#2b7bba", "#1b4f7a", "#5fa8e0", "#3b7fb5", "#909090", "#c8c8c8"))
    axes[0].set_title(f"events/s on a {result.config['events']:,}-event backlog\n"
                      f"vs lean: {result.ratio:.2f}, durable {result.durable_ratio:.2f} (target >= {TARGET_RATIO})")
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
    print(f"throughput (events/s): rankflow {r.events_per_s:,.0f}, durable {result.rankflow_durable.events_per_s:,.0f}, "
          f"baseline lean {result.baseline_lean.events_per_s:,.0f}, full {b.events_per_s:,.0f}; vs lean "
          f"{result.ratio:.2f}, durable {result.durable_ratio:.2f} (target >= {TARGET_RATIO}); rankings equal: "
          f"{result.exact}")
    print(f"--processes 2: {result.rankflow_2p.events_per_s:,.0f} events/s (x{result.processes_speedup:.2f} one "
          f"process), durable {result.rankflow_durable_2p.events_per_s:,.0f} (x{result.durable_processes_speedup:.2f})")
    if "freshness" in cfg.parts:
        print(f"freshness at {cfg.rate}/s: rankflow p50 {r.freshness_p50_s:.3f}s p99 {r.freshness_p99_s:.3f}s; "
              f"baseline p50 {b.freshness_p50_s:.3f}s p99 {b.freshness_p99_s:.3f}s (target p99 < 1s)")
    if "memory" in cfg.parts:
        print(f"memory per counted user: rankflow {r.memory_bytes_per_user:,.0f} B, "
              f"baseline {b.memory_bytes_per_user:,.0f} B")
    print(f"wrote {json_path} and {png_path}")
    return result

