"""``rankflow bench`` and ``rankflow bench-sweep``: the listener flow and the seed's first design.

``rankflow bench``, all in one run, on a local Redis and broker it starts itself
(:class:`ListenersRig`):

1. **Throughput** on a backlog: a generated log (with chaos) is produced to a
   topic; each system runs it to the end as its own process: rankflow
   (``rankflow run --until-eof``), rankflow durable (the same with
   ``--recovery-dir``, what production runs), the same two with ``--processes 2``,
   and the baseline in its full and lean forms (``rankflow.bench.baseline``). All
   rankings must be equal (exact). The ratios that count are against the lean
   baseline, the strongest form of the old design.
2. **Freshness** at a steady rate: events are produced at ``--rate`` per second for
   ``--steady-s`` seconds while each system runs live; for a sample of events,
   freshness is the time from the producer's send to the first published snapshot
   whose positions include it (rankflow) or to the moment its batch was applied in
   Redis (baseline).
3. **Memory** per counted user: a log in which ``--memory-users`` users each start
   one playback; rankflow's peak RSS (``VmHWM``) above an empty run's, and Redis's
   ``used_memory`` growth for the baseline, each divided by the counted users.

It writes ``bench.json`` and ``bench.png`` to ``--out`` and prints a summary.

``rankflow bench-sweep``: real topics have many partitions and many users; a benchmark
on one shape can flatter. For each number of users a log is generated (same events
count, chaos and song catalogue), produced to one topic per partition count, and
rankflow, rankflow durable and the lean baseline run each topic to its end side by
side. Every cell checks the rankings are equal. Writes ``sweep.json`` and ``sweep.png``.
"""

from __future__ import annotations

import itertools
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import orjson

from rankflow.bench import rig
from rankflow.bench.rig import Rig
from rankflow.connectors.kafka import ensure_topic
from rankflow.connectors.redis_read import read_history, read_latest
from rankflow.connectors.redis_replies import Scored
from rankflow.generate import generate
from rankflow.produce import produce_steady

TARGET_RATIO = 2.0
TARGET_FRESHNESS_P99_S = 1.0
SYSTEMS = ("rankflow", "rankflow_durable", "rankflow_2p", "rankflow_durable_2p", "baseline", "baseline_lean")
SWEEP_SYSTEMS = ("rankflow", "rankflow_durable", "baseline_lean")
PROCESS_COUNTS = (1, 2, 4)
PARTS = ("throughput", "freshness", "memory", "processes")
"""Every part of ``rankflow bench``, each run by default."""
TARGET_CPU_RATIO = 0.5  # rankflow's CPU (flow + Redis + broker) at most half the baseline's (issue 21)
TARGET_PROCESSES_CPU = 1.2  # CPU per event with more processes at most 1.2x one process's


# -- the systems -------------------------------------------------------------------------
@dataclass
class BacklogRun:
    """One system on one backlog."""

    system: str
    seconds: float
    events_per_s: float
    peak_rss_bytes: int
    broker_cpu_s: float
    redis_cpu_s: float
    top: list[tuple[str, int]]
    cpu_s: float = 0.0  # the system's own processes (the flow, or the baseline's consumer)


class ListenersRig(Rig):
    """The rig with the listener systems:

    * ``rankflow``: ``rankflow run --until-eof``, one process;
    * ``rankflow_durable``: the same with a fresh ``--recovery-dir`` (what production runs);
    * ``rankflow_2p``, ``rankflow_durable_2p``: the same with ``--processes 2``;
    * ``baseline`` / ``baseline_lean``: the seed's design, full or lean
      (``rankflow.bench.baseline``), whose state is in Redis.

    Every run's ranking is compared with the first one's on the same topic: a benchmark
    of a system that counts wrong measures nothing."""

    def __init__(self, seed: int = 1) -> None:
        super().__init__(seed)
        self.rankflow_extra: list[str] = []  # options every ``rankflow run`` of the rig gets (e.g. --recent-minutes 0)

    def log_file(self, events: int, users: int, songs: int) -> Path:
        """A generated log with chaos, kept in ``data/`` across benchmark runs."""
        path = Path("data") / f"bench-{events}-{users}-{songs}.jsonl"
        if not path.exists():
            self.log(f"generating {path}")
            generate(users, songs, events, seed=self.seed, out=path)
        return path

    def rankflow_cmd(self, topic: str, namespace: str, *extra: str) -> list[str]:
        return self.flow_cmd("listeners", topic, namespace, *self.rankflow_extra, *extra)

    def listeners_baseline_cmd(self, topic: str, namespace: str, *extra: str) -> list[str]:
        return self.baseline_cmd("baseline", topic, "--namespace", namespace, *extra)

    def command(self, system: str, topic: str, namespace: str) -> list[str]:
        """``rankflow[_durable][_2p]``: with ``--recovery-dir``, with ``--processes 2``."""
        if system.startswith("rankflow"):
            extra = ["--until-eof"]
            if "_durable" in system:
                extra += ["--recovery-dir", str(self.work / f"{namespace}.recovery")]
            if system.endswith("_2p"):
                extra += ["--processes", "2"]
            return self.rankflow_cmd(topic, namespace, *extra)
        variant = "lean" if system == "baseline_lean" else "full"
        return self.listeners_baseline_cmd(topic, namespace, "--variant", variant)

    def backlog(self, system: str, topic: str, events: int, k: int = 100) -> BacklogRun:
        """Run ``system`` over the whole topic; its time, CPU beside it, and its top ``k``."""
        namespace = f"{system}-{topic}"
        broker0, redis0 = self.services_cpu()
        run = self.timed(self.command(system, topic, namespace), namespace)
        broker1, redis1 = self.services_cpu()
        out = BacklogRun(system, run.seconds, events / run.seconds, run.peak_rss_bytes, broker1 - broker0,
                         redis1 - redis0, self.top(system, namespace, k), run.cpu_s)
        self.log(f"{system} on {topic}: {out.events_per_s:,.0f} events/s ({run.seconds:.2f} s; own "
                 f"{out.cpu_s:.1f} CPU-s, broker {out.broker_cpu_s:.1f}, Redis {out.redis_cpu_s:.1f})")
        return out

    def top(self, system: str, namespace: str, k: int) -> list[tuple[str, int]]:
        assert self.client is not None
        if system.startswith("rankflow"):
            snapshot = read_latest(self.client, namespace)
            assert snapshot is not None, f"rankflow published nothing in {namespace}"
            return [(i["song_id"], i["listeners"]) for i in snapshot["items"][:k]]
        pairs = cast(Scored, self.client.zrange("{" + namespace + "}:songs", 0, k - 1, desc=True, withscores=True))
        return [(song.decode(), int(count)) for song, count in pairs]


# -- rankflow bench ----------------------------------------------------------------------
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
    parts: tuple[str, ...] = PARTS
    recent_minutes: int | None = None  # rankflow runs with --recent-minutes N (None: the default)


@dataclass
class SystemResult:
    events_per_s: float = 0.0
    seconds: float = 0.0
    broker_cpu_s: float = 0.0  # CPU the broker spent while this system read the backlog
    redis_cpu_s: float = 0.0
    cpu_s: float = 0.0  # the system's own processes over the backlog
    cpu_s_per_1m: dict[str, float] = field(default_factory=dict)  # own, redis, broker, total: per 1M events
    freshness_p50_s: float | None = None
    freshness_p99_s: float | None = None
    freshness_samples: int = 0
    memory_bytes_per_user: float | None = None


@dataclass
class BenchResult(rig.Result):
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
    cpu_ratio: float = 0.0  # rankflow's CPU per event (own + Redis + broker) / the lean baseline's
    durable_cpu_ratio: float = 0.0
    processes: dict[str, dict[str, float]] = field(default_factory=dict)  # part "processes": per count, its run
    processes_exact: bool | None = None  # every count's ranking equal to one process's
    processes_speedup: float = 0.0  # --processes 2 / one process
    durable_processes_speedup: float = 0.0


class Bench:
    def __init__(self, cfg: BenchConfig) -> None:
        self.cfg = cfg
        self.rig = ListenersRig(cfg.seed)
        if cfg.recent_minutes is not None:
            self.rig.rankflow_extra = ["--recent-minutes", str(cfg.recent_minutes)]
        self.work = self.rig.work

    def log(self, message: str) -> None:
        self.rig.log(message)

    @property
    def client(self) -> Any:
        assert self.rig.client is not None
        return self.rig.client

    # -- 1. throughput ------------------------------------------------------------
    def throughput(self, result: BenchResult) -> None:
        cfg = self.cfg
        topic = "backlog"
        self.rig.produce(self.rig.log_file(cfg.events, cfg.users, cfg.songs), topic, cfg.partitions)
        runs = {system: self.rig.backlog(system, topic, cfg.events) for system in SYSTEMS}
        for system, run in runs.items():
            target: SystemResult = getattr(result, system)
            target.seconds, target.events_per_s = run.seconds, run.events_per_s
            target.broker_cpu_s, target.redis_cpu_s, target.cpu_s = run.broker_cpu_s, run.redis_cpu_s, run.cpu_s
            target.cpu_s_per_1m = rig.cpu_per_million(run.cpu_s, run.redis_cpu_s, run.broker_cpu_s, cfg.events)
        result.exact = all(run.top == runs["rankflow"].top for run in runs.values())
        eps = {system: run.events_per_s for system, run in runs.items()}
        result.ratio = eps["rankflow"] / eps["baseline_lean"]
        result.durable_ratio = eps["rankflow_durable"] / eps["baseline_lean"]
        result.ratio_full = eps["rankflow"] / eps["baseline"]
        result.processes_speedup = eps["rankflow_2p"] / eps["rankflow"]
        result.durable_processes_speedup = eps["rankflow_durable_2p"] / eps["rankflow_durable"]
        lean = result.baseline_lean.cpu_s_per_1m["total"]
        result.cpu_ratio = result.rankflow.cpu_s_per_1m["total"] / lean
        result.durable_cpu_ratio = result.rankflow_durable.cpu_s_per_1m["total"] / lean
        self.log(f"vs the lean baseline: rankflow {result.ratio:.2f}, durable {result.durable_ratio:.2f}; "
                 f"vs the full one {result.ratio_full:.2f}; CPU per event x{result.cpu_ratio:.2f}, durable "
                 f"x{result.durable_cpu_ratio:.2f}; rankings equal: {result.exact}")

    # -- processes ----------------------------------------------------------------
    def processes(self, result: BenchResult) -> None:
        """The same backlog with ``--processes`` 1, 2 and 4 (not durable): events/s and the
        CPU seconds per million events of the flow's processes, the broker and Redis; the
        rankings must be equal. What decides the cost of a cluster of machines."""
        cfg = self.cfg
        topic = "processes"
        self.rig.produce(self.rig.log_file(cfg.events, cfg.users, cfg.songs), topic, max(cfg.partitions, 4))
        tops = {}
        for n in PROCESS_COUNTS:
            namespace = f"procs-{n}"
            broker0, redis0 = self.rig.services_cpu()
            run = self.rig.timed(self.rig.rankflow_cmd(topic, namespace, "--until-eof", "--processes", str(n)),
                                 namespace)
            broker1, redis1 = self.rig.services_cpu()
            per_m = 1e6 / cfg.events
            result.processes[str(n)] = {
                "events_per_s": cfg.events / run.seconds, "flow_cpu_s_per_1m": run.cpu_s * per_m,
                "broker_cpu_s_per_1m": (broker1 - broker0) * per_m, "redis_cpu_s_per_1m": (redis1 - redis0) * per_m}
            snapshot = read_latest(self.client, namespace)
            tops[n] = snapshot["items"] if snapshot else None
            self.log(f"--processes {n}: {cfg.events / run.seconds:,.0f} events/s, flow "
                     f"{run.cpu_s * per_m:.1f} CPU-s per 1M events")
        result.processes_exact = all(top == tops[1] and top is not None for top in tops.values())

    # -- 2. freshness -------------------------------------------------------------
    def steady_producer(self, topic: str, sample_every: int) -> dict[tuple[int, int], float]:
        """Produce at ``cfg.rate``/s for ``cfg.steady_s``; return sampled (partition, offset) -> send time."""
        cfg = self.cfg
        ensure_topic(self.rig.brokers, topic, cfg.partitions)
        return produce_steady(self.rig.brokers, topic, cfg.rate, cfg.users, cfg.songs, cfg.seed + 1,
                              count=int(cfg.rate * cfg.steady_s), sample_every=sample_every)

    def freshness(self, result: BenchResult) -> None:
        cfg = self.cfg
        sample_every = max(1, int(cfg.rate * cfg.steady_s) // 5000)
        total = int(cfg.rate * cfg.steady_s)
        self._rankflow_freshness(result.rankflow, sample_every, total)
        self._baseline_freshness(result.baseline, sample_every, total)

    def _rankflow_freshness(self, target: SystemResult, sample_every: int, total: int) -> None:
        """rankflow live: from the send to the first published snapshot whose positions include it."""
        cfg = self.cfg
        topic, ns = "steady-rankflow", "rf-steady"
        ensure_topic(self.rig.brokers, topic, cfg.partitions)
        self.log(f"rankflow live at {cfg.rate}/s for {cfg.steady_s:.0f}s")
        proc = self.rig.start(self.rig.rankflow_cmd(topic, ns), ns)
        rig.wait_until(lambda: read_latest(self.client, ns) is not None, 60, proc, "rankflow did not start publishing")
        sent = self.steady_producer(topic, sample_every)
        rig.wait_until(lambda: self._published_position(ns) >= total, 120)  # what was published by then counts
        rig.stop(proc)
        history = read_history(self.client, ns)
        latencies = []
        for (part, offset), at in sent.items():
            name = f"{topic}/{part}"
            seen = next((s["published_at"] / 1000 for s in history if s["positions"].get(name, 0) > offset), None)
            if seen is not None:
                latencies.append(seen - at)
        self._record_freshness(target, latencies, len(sent))

    def _baseline_freshness(self, target: SystemResult, sample_every: int, total: int) -> None:
        """The baseline live: from the send to the moment its batch was applied in Redis."""
        cfg = self.cfg
        topic = "steady-baseline"
        ensure_topic(self.rig.brokers, topic, cfg.partitions)
        self.log(f"baseline live at {cfg.rate}/s for {cfg.steady_s:.0f}s")
        samples = self.work / "baseline-applied.json"
        proc = self.rig.start(self.rig.listeners_baseline_cmd(
            topic, "bl-steady", "--follow", "--sample-every", "1", "--samples-out", str(samples),
            "--expect", str(total)), "bl-steady")
        time.sleep(1.0)
        sent = self.steady_producer(topic, sample_every)
        proc.wait(timeout=300)
        applied = {tuple(k): v for k, v in orjson.loads(samples.read_bytes())}
        latencies = [applied[key] - at for key, at in sent.items() if key in applied]
        self._record_freshness(target, latencies, len(sent))

    def _record_freshness(self, target: SystemResult, latencies: list[float], sampled: int) -> None:
        if latencies:
            target.freshness_p50_s = rig.percentile(latencies, 0.5)
            target.freshness_p99_s = rig.percentile(latencies, 0.99)
        target.freshness_samples = len(latencies)
        self.log(f"freshness p50 {target.freshness_p50_s}, p99 {target.freshness_p99_s} "
                 f"({len(latencies)} of {sampled} samples)")

    def _published_position(self, namespace: str) -> int:
        snap = read_latest(self.client, namespace)
        return sum(snap["positions"].values()) if snap else 0

    # -- 3. memory ----------------------------------------------------------------
    def memory_log(self, path: Path) -> None:
        """``memory_users`` users, each starting one playback of a song drawn by Zipf."""
        cfg = self.cfg
        rng = random.Random(cfg.seed)
        songs = [f"song_{i}" for i in range(cfg.songs)]
        weights = list(itertools.accumulate(1.0 / r for r in range(1, cfg.songs + 1)))
        with open(path, "wb") as f:
            for u in range(cfg.memory_users):
                song = rng.choices(songs, cum_weights=weights)[0]
                f.write(orjson.dumps({"user_id": f"user_{u}", "playback_id": f"pb_{u}", "song_id": song,
                                      "type": "START", "version": 1, "ts": u}) + b"\n")

    def memory(self, result: BenchResult) -> None:
        cfg = self.cfg
        log, empty = self.work / "memory.jsonl", self.work / "empty.jsonl"
        self.memory_log(log)
        empty.write_bytes(b'{"user_id":"u","playback_id":"p","song_id":"s","type":"START","version":1,"ts":1}\n')
        self.rig.produce(log, "memory", cfg.partitions)
        self.rig.produce(empty, "empty", cfg.partitions)
        self.log(f"memory with {cfg.memory_users} counted users")
        rss_empty = self.rig.timed(self.rig.rankflow_cmd("empty", "rf-empty", "--until-eof"), "rf-empty")
        rss_full = self.rig.timed(self.rig.rankflow_cmd("memory", "rf-memory", "--until-eof"), "rf-memory")
        self.log(f"peak RSS: empty run {rss_empty.peak_rss_bytes / 2**20:.0f} MiB, full run "
                 f"{rss_full.peak_rss_bytes / 2**20:.0f} MiB")
        snapshot = read_latest(self.client, "rf-memory")
        assert snapshot is not None, "the memory run published nothing"
        counted = snapshot["counted_users"]
        result.rankflow.memory_bytes_per_user = (rss_full.peak_rss_bytes - rss_empty.peak_rss_bytes) / counted
        before = self.rig.used_memory()
        self.rig.timed(self.rig.listeners_baseline_cmd("memory", "bl-memory"), "bl-memory")
        result.baseline.memory_bytes_per_user = (self.rig.used_memory() - before) / counted
        self.log(f"bytes per counted user: rankflow {result.rankflow.memory_bytes_per_user:,.0f}, "
                 f"baseline (Redis) {result.baseline.memory_bytes_per_user:,.0f}")

    # -- all ----------------------------------------------------------------------
    def run(self) -> BenchResult:
        cfg = self.cfg
        result = BenchResult(config=asdict(cfg), machine=rig.machine())
        with self.rig:
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
        if "throughput" in cfg.parts:
            result.targets.update({"cpu_ratio_max": TARGET_CPU_RATIO,
                                   "cpu_ratio_met": 0 < result.cpu_ratio <= TARGET_CPU_RATIO,
                                   "durable_cpu_ratio_met": 0 < result.durable_cpu_ratio <= TARGET_CPU_RATIO})
        if result.processes:
            one = result.processes["1"]["flow_cpu_s_per_1m"]
            worst = max(r["flow_cpu_s_per_1m"] for r in result.processes.values()) / one
            result.targets.update({"processes_cpu_max": TARGET_PROCESSES_CPU,
                                   "processes_cpu_met": worst <= TARGET_PROCESSES_CPU,
                                   "processes_exact": result.processes_exact})
        return result


def chart(result: BenchResult, path: Path) -> None:
    systems = ("rankflow", "baseline")
    colors = ("#2b7bba", "#b0b0b0")

    def throughput(ax: Any) -> None:
        backlog = ("rankflow", "rankflow_durable", "rankflow_2p", "rankflow_durable_2p", "baseline_lean", "baseline")
        eps = [getattr(result, s).events_per_s for s in backlog]
        ax.bar(["rf", "rf\ndurable", "rf\n2 proc.", "rf dur.\n2 proc.", "baseline\nlean", "baseline\nfull"], eps,
               color=("#2b7bba", "#1b4f7a", "#5fa8e0", "#3b7fb5", "#909090", "#c8c8c8"))
        ax.set_title(f"events/s on a {result.config['events']:,}-event backlog\n"
                     f"vs lean: {result.ratio:.2f}, durable {result.durable_ratio:.2f} (target >= {TARGET_RATIO})")
        rig.label_bars(ax, eps)

    def freshness(ax: Any) -> None:
        width = 0.38
        for j, (q, label) in enumerate((("freshness_p50_s", "p50"), ("freshness_p99_s", "p99"))):
            vals = [getattr(getattr(result, s), q) or 0 for s in systems]
            ax.bar([i + (j - 0.5) * width for i in range(2)], vals, width, label=label,
                   color=[c if j else c + "99" for c in colors], edgecolor="black")
        ax.axhline(TARGET_FRESHNESS_P99_S, color="red", linestyle="--", linewidth=1, label="p99 target")
        ax.set_xticks(range(2), systems)
        ax.set_ylabel("seconds")
        ax.set_title(f"freshness at {result.config['rate']:,} events/s\n(produced -> visible)")
        ax.legend()

    def memory(ax: Any) -> None:
        mem = [getattr(result, s).memory_bytes_per_user or 0 for s in systems]
        ax.bar(systems, mem, color=colors)
        ax.set_title(f"bytes per counted user\n({result.config['memory_users']:,} users)")
        rig.label_bars(ax, mem)

    def cpu(ax: Any) -> None:
        shown = ("rankflow", "rankflow_durable", "baseline_lean", "baseline")
        rig.cpu_bars(ax, ["rf", "rf\ndurable", "baseline\nlean", "baseline\nfull"],
                     [getattr(result, s).cpu_s_per_1m for s in shown],
                     f"CPU per 1M events (own + Redis + broker)\nx{result.cpu_ratio:.2f} lean, durable "
                     f"x{result.durable_cpu_ratio:.2f} (target <= {TARGET_CPU_RATIO})")

    def processes(ax: Any) -> None:
        counts = list(result.processes)
        vals = [result.processes[n]["flow_cpu_s_per_1m"] for n in counts]
        ax.bar([f"{n} proc." for n in counts], vals, color="#2b7bba")
        ax.axhline(vals[0] * TARGET_PROCESSES_CPU, color="red", linestyle="--", linewidth=1,
                   label=f"x{TARGET_PROCESSES_CPU} one process")
        rig.label_bars(ax, vals, ".1f")
        ax.set_ylabel("flow CPU seconds per 1M events")
        ax.set_title(f"--processes on one backlog\nrankings equal: {result.processes_exact}")
        ax.legend()

    parts = result.config.get("parts", PARTS)
    panels = [draw for part, draw in (("throughput", throughput), ("throughput", cpu), ("processes", processes),
                                      ("freshness", freshness), ("memory", memory)) if part in parts]
    rig.chart(path, f"rankflow vs the seed's first design (Redis Lua per event) — {result.machine['cpus']} CPUs",
              panels, (5, 4.4), dpi=110)


def main(cfg: BenchConfig) -> BenchResult:
    result = Bench(cfg).run()
    json_path, png_path = rig.write_results(result, Path(cfg.out), "bench", chart)
    r, b = result.rankflow, result.baseline
    if "throughput" in cfg.parts:
        print(f"throughput (events/s): rankflow {r.events_per_s:,.0f}, durable "
              f"{result.rankflow_durable.events_per_s:,.0f}, baseline lean {result.baseline_lean.events_per_s:,.0f}, "
              f"full {b.events_per_s:,.0f}; vs lean {result.ratio:.2f}, durable {result.durable_ratio:.2f} "
              f"(target >= {TARGET_RATIO}); rankings equal: {result.exact}")
        print("CPU-s per 1M events (own + Redis + broker = total): " + "; ".join(
            f"{s} {c['own']:.2f} + {c['redis']:.2f} + {c['broker']:.2f} = {c['total']:.2f}"
            for s in ("rankflow", "rankflow_durable", "baseline_lean", "baseline")
            if (c := getattr(result, s).cpu_s_per_1m)) +
            f"; rankflow / lean x{result.cpu_ratio:.2f}, durable x{result.durable_cpu_ratio:.2f} "
            f"(target <= {TARGET_CPU_RATIO})")
        print(f"--processes 2: {result.rankflow_2p.events_per_s:,.0f} events/s (x{result.processes_speedup:.2f} one "
              f"process), durable {result.rankflow_durable_2p.events_per_s:,.0f} "
              f"(x{result.durable_processes_speedup:.2f})")
    if result.processes:
        one = result.processes["1"]["flow_cpu_s_per_1m"]
        print("processes (flow CPU-s per 1M events, x one process): " + ", ".join(
            f"{n}: {r['flow_cpu_s_per_1m']:.1f} (x{r['flow_cpu_s_per_1m'] / one:.2f}, {r['events_per_s']:,.0f} events/s)"
            for n, r in result.processes.items()) + f"; rankings equal: {result.processes_exact}")
    if "freshness" in cfg.parts:
        print(f"freshness at {cfg.rate}/s: rankflow p50 {r.freshness_p50_s:.3f}s p99 {r.freshness_p99_s:.3f}s; "
              f"baseline p50 {b.freshness_p50_s:.3f}s p99 {b.freshness_p99_s:.3f}s (target p99 < 1s)")
    if "memory" in cfg.parts:
        print(f"memory per counted user: rankflow {r.memory_bytes_per_user:,.0f} B, "
              f"baseline {b.memory_bytes_per_user:,.0f} B")
    print(rig.wrote(json_path, png_path))
    return result


# -- rankflow bench-sweep ----------------------------------------------------------------
@dataclass
class SweepConfig:
    events: int = 1_000_000
    users: tuple[int, ...] = (100_000, 1_000_000)
    partitions: tuple[int, ...] = (4, 8, 16, 32)
    songs: int = 20_000
    seed: int = 1
    out: str = "bench-results"


@dataclass
class Cell:
    users: int
    partitions: int
    runs: dict[str, dict[str, Any]]
    ratio: float  # rankflow / lean baseline
    durable_ratio: float
    exact: bool


@dataclass
class SweepResult(rig.Result):
    cells: list[Cell] = field(default_factory=list)


def cell(bench: ListenersRig, cfg: SweepConfig, users: int, partitions: int) -> Cell:
    topic = f"sweep-u{users}-p{partitions}"
    bench.produce(bench.log_file(cfg.events, users, cfg.songs), topic, partitions)
    runs: dict[str, BacklogRun] = {system: bench.backlog(system, topic, cfg.events) for system in SWEEP_SYSTEMS}
    lean = runs["baseline_lean"].events_per_s
    result = Cell(users, partitions, {s: {k: v for k, v in asdict(r).items() if k != "top"} for s, r in runs.items()},
                  runs["rankflow"].events_per_s / lean, runs["rankflow_durable"].events_per_s / lean,
                  all(r.top == runs["rankflow"].top for r in runs.values()))
    bench.log(f"{users:,} users, {partitions} partitions: ratio {result.ratio:.2f}, durable "
              f"{result.durable_ratio:.2f}, exact {result.exact}")
    return result


def sweep(cfg: SweepConfig) -> SweepResult:
    result = SweepResult(config=asdict(cfg), machine=rig.machine())
    with ListenersRig(cfg.seed) as bench:
        for users in cfg.users:
            for partitions in cfg.partitions:
                result.cells.append(cell(bench, cfg, users, partitions))
    result.targets = {
        "ratio_min": TARGET_RATIO,
        "every_cell_met": all(c.ratio >= TARGET_RATIO for c in result.cells),
        "every_durable_cell_met": all(c.durable_ratio >= TARGET_RATIO for c in result.cells),
        "exact": all(c.exact for c in result.cells),
    }
    return result


def sweep_chart(result: SweepResult, path: Path) -> None:
    colors = {"rankflow": "#2b7bba", "rankflow_durable": "#1b4f7a", "baseline_lean": "#909090"}

    def panel(n: int) -> rig.Panel:
        def draw(ax: Any) -> None:
            cells = sorted((c for c in result.cells if c.users == n), key=lambda c: c.partitions)
            xs = range(len(cells))
            width = 0.27
            for j, system in enumerate(SWEEP_SYSTEMS):
                ax.bar([x + (j - 1) * width for x in xs], [c.runs[system]["events_per_s"] for c in cells], width,
                       label=system.replace("_", " "), color=colors[system])
            for x, c in zip(xs, cells):
                top = max(r["events_per_s"] for r in c.runs.values())
                ax.text(x, top * 1.02, f"x{c.ratio:.2f}\ndur. x{c.durable_ratio:.2f}", ha="center", va="bottom",
                        fontsize=8)
            ax.set_xticks(list(xs), [f"{c.partitions} partitions" for c in cells])
            ax.set_ylabel("events/s")
            ax.set_ylim(0, max(r["events_per_s"] for c in cells for r in c.runs.values()) * 1.25)
            ax.set_title(f"{n:,} users, {result.config['events']:,} events (target x{TARGET_RATIO} vs lean)")
            ax.legend(loc="lower left", fontsize=8)
        return draw

    users = sorted({c.users for c in result.cells})
    rig.chart(path, f"rankflow vs the lean baseline across topic shapes — {result.machine['cpus']} CPUs",
              [panel(n) for n in users], (6.5, 4.4), cols=len(users), dpi=110)


def sweep_main(cfg: SweepConfig) -> SweepResult:
    result = sweep(cfg)
    json_path, png_path = rig.write_results(result, Path(cfg.out), "sweep", sweep_chart)
    print(f"{'users':>10} {'parts':>5} {'rankflow':>10} {'durable':>10} {'lean':>10} {'ratio':>6} {'dur.':>6} exact")
    for c in result.cells:
        r = c.runs
        print(f"{c.users:>10,} {c.partitions:>5} {r['rankflow']['events_per_s']:>10,.0f} "
              f"{r['rankflow_durable']['events_per_s']:>10,.0f} {r['baseline_lean']['events_per_s']:>10,.0f} "
              f"{c.ratio:>6.2f} {c.durable_ratio:>6.2f} {c.exact}")
    print(rig.wrote(json_path, png_path))
    return result
