"""``rankflow bench-activity``: its configuration, what each part measures, and the targets."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rankflow.bench.rig import Latency, PartsResult

PARTS = ("throughput", "freshness", "queries", "memory", "error", "profile")
DEFAULT_PARTS = ("throughput", "freshness", "queries", "memory", "error")
SYSTEMS = ("baseline", "baseline_lean", "flow", "flow_durable")

TARGET_RATIO = 2.0
TARGET_CPU_RATIO = 0.5  # the flow's CPU per message (own + Redis + broker) at most half the lean seed's (issue 21)
TARGET_FRESHNESS_P99_S = 5.0
AIM_FRESHNESS_P99_S = 1.0
TARGET_QUERY_P99_MS = 10.0
HOUR_MS = 3_600_000
MEMORY_START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z: the memory logs' first hour


@dataclass
class ActivityBenchConfig:
    events: int = 1_000_000
    workspaces: int = 5_000
    channels: int = 5_000
    users: int = 10_000
    event_rate: float = 100.0  # messages per second of event time in the backlog: 1M span 2.8 hours
    partitions: int = 8
    reps: int = 2
    durable: bool = True
    compare_workspaces: int = 200
    rates: tuple[int, ...] = (50_000, 25_000)
    steady_s: float = 30.0
    fresh_read_workspaces: int = 10
    queries_rate: int = 1_000
    queries_s: float = 60.0  # a minute with traffic: one bucket leaves the window during each query's load
    queries_traffic: int = 2_000
    publish_stage: int | None = None  # the flow's --publish-stage (None: its default)
    memory_pairs: int = 1_000_000
    memory_workspaces: int = 1_000
    memory_churn: int = 3
    memory_summary: int = 1_000
    memory_durable: bool = True
    summaries: tuple[int, ...] = (100, 1_000)
    seed: int = 1
    out: str = "bench-results"
    parts: tuple[str, ...] = DEFAULT_PARTS


@dataclass
class Run:
    """One system over the whole backlog."""

    system: str
    order: int
    seconds: float
    events_per_s: float
    peak_rss_bytes: int
    broker_cpu_s: float
    redis_cpu_s: float
    mismatches: int
    redis_used_memory_bytes: int
    cpu_s: float = 0.0  # the system's own process (user + system)
    dead_letters: dict[str, int] = field(default_factory=dict)  # the flow's, by reason


@dataclass
class Throughput:
    runs: list[Run] = field(default_factory=list)
    median_events_per_s: dict[str, float] = field(default_factory=dict)
    ratio: float = 0.0  # flow / baseline (the seed: EXPIRE per message)
    ratio_lean: float = 0.0  # flow / baseline_lean (one EXPIRE per key per batch): the one that counts
    durable_ratio: float = 0.0
    durable_ratio_lean: float = 0.0
    median_cpu_s_per_1m: dict[str, dict[str, float]] = field(default_factory=dict)  # system -> own, redis, broker, total
    cpu_ratio_lean: float = 0.0  # the flow's total CPU per message / the lean seed's (medians)
    durable_cpu_ratio_lean: float = 0.0
    window: list[int] = field(default_factory=list)  # the flow's final window, [start, end) ms
    workspaces_compared: int = 0
    pairs_compared: int = 0
    mismatches: int = 0  # over every run
    mismatch_examples: list[str] = field(default_factory=list)
    dead_letters: int = 0  # the flow's, on a clean log: none but ``expired`` (see ``Run.dead_letters``)
    dead_letters_not_expired: int = 0  # must be 0
    active_pairs: int = 0  # in the flow's final snapshot
    pairs_in_log: int = 0
    log_events: int = 0
    wall_s: float = 0.0


@dataclass
class FreshnessRun:
    system: str
    rate: int
    achieved_rate: float = 0.0
    seconds: float = 0.0
    samples: int = 0
    seen: int = 0
    p50_s: float | None = None
    p99_s: float | None = None
    max_s: float | None = None
    caught_up_s: float | None = None  # after the producer's last message, until everything was in (None: never)
    published_samples: int = 0  # baseline: samples of the workspaces the reader refreshes
    published_p50_s: float | None = None  # baseline: into a refreshed cached union
    published_p99_s: float | None = None
    published_max_s: float | None = None
    cpu_cores: dict[str, float] = field(default_factory=dict)


@dataclass
class Freshness:
    runs: list[FreshnessRun] = field(default_factory=list)
    wall_s: float = 0.0


@dataclass
class Queries:
    rate: int = 0
    seconds: float = 0.0
    traffic_rate: int = 0
    publish_stage: int | None = None  # the flow's --publish-stage (None: its default, 2000 live)
    workspaces_asked: int = 0
    phases: dict[str, dict[str, Latency]] = field(default_factory=dict)  # phase -> query -> latency
    cpu_cores: dict[str, dict[str, float]] = field(default_factory=dict)
    redis_slow: dict[str, dict[str, Any]] = field(default_factory=dict)
    flow_publishes: dict[str, list[str]] = field(default_factory=dict)  # phase -> the publisher's log of staging
    wall_s: float = 0.0


@dataclass
class MemoryRun:
    name: str  # exact, summary, churn; baseline, baseline_churn
    durable: bool = False
    pairs_ever: int = 0
    active_pairs: int = 0
    events: int = 0
    seconds: float = 0.0
    peak_rss_bytes: int = 0  # VmHWM: includes the Kafka client's read-ahead of the messages still to come
    rss_end_bytes: int = 0  # VmRSS once everything is counted and published (nothing left to read)
    rss_bytes_per_pair: float | None = None  # (rss_end - the empty run's) / active pairs
    peak_rss_bytes_per_pair: float | None = None  # (peak - the empty run's end) / active pairs
    redis_bytes: int = 0
    redis_bytes_per_pair: float | None = None
    recovery_dir_bytes: int = 0
    recovery_dir_bytes_per_pair: float | None = None
    redis_window_bytes_per_pair: float | None = None  # baseline: MEMORY USAGE of the window's keys only
    stages: list[dict[str, Any]] = field(default_factory=list)
    """churn: after each hour of the log (produced one hour at a time, each read to the end):
    pairs_ever, active_pairs, rss_bytes, redis_bytes, recovery_dir_bytes, and per active pair."""


@dataclass
class Memory:
    pairs: int = 0
    workspaces: int = 0
    churn: int = 0
    summary: int = 0
    rss_empty_bytes: int = 0  # the flow's VmRSS after counting and publishing one message
    runs: list[MemoryRun] = field(default_factory=list)
    wall_s: float = 0.0


@dataclass
class ErrorRun:
    n: int
    total: int = 0  # T: the events that count in the window
    bound: float = 0.0  # T / N
    items: int = 0
    exact_items: int = 0  # count_low == count_high
    width_max: int = 0  # count_high - count_low
    width_mean: float = 0.0
    error_low_max: int = 0  # true - count_low
    error_low_mean: float = 0.0
    error_low_max_relative: float = 0.0  # (true - count_low) / true
    error_high_max: int = 0  # count_high - true
    violations: int = 0  # items outside count_low <= true <= count_high, or wider than T / N
    recall_top_k: float = 0.0  # of the exact global top K, the share the summary lists
    k: int = 0
    seconds: float = 0.0
    events_per_s: float = 0.0


@dataclass
class Error:
    runs: list[ErrorRun] = field(default_factory=list)
    wall_s: float = 0.0


@dataclass
class Profile:
    shares: dict[str, dict[str, float]] = field(default_factory=dict)  # config -> part -> share of samples
    seconds: dict[str, float] = field(default_factory=dict)
    cpu_s: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0


@dataclass
class ActivityBenchResult(PartsResult):
    throughput: Throughput | None = None
    freshness: Freshness | None = None
    queries: Queries | None = None
    memory: Memory | None = None
    error: Error | None = None
    profile: Profile | None = None


def targets(r: ActivityBenchResult) -> dict[str, Any]:
    t: dict[str, Any] = {}
    if r.throughput:
        t["throughput_ratio_min"] = TARGET_RATIO
        t["ratio_met"] = r.throughput.ratio_lean >= TARGET_RATIO and r.throughput.ratio >= TARGET_RATIO
        t["durable_ratio_met"] = (r.throughput.durable_ratio_lean >= TARGET_RATIO
                                  and r.throughput.durable_ratio >= TARGET_RATIO)
        t["exact"] = r.throughput.mismatches == 0 and r.throughput.dead_letters_not_expired == 0
        if r.throughput.cpu_ratio_lean:
            t["cpu_ratio_max"] = TARGET_CPU_RATIO
            t["cpu_ratio_met"] = r.throughput.cpu_ratio_lean <= TARGET_CPU_RATIO
            t["durable_cpu_ratio_met"] = 0 < r.throughput.durable_cpu_ratio_lean <= TARGET_CPU_RATIO
    if r.freshness:
        t["freshness_p99_max_s"], t["freshness_p99_aim_s"] = TARGET_FRESHNESS_P99_S, AIM_FRESHNESS_P99_S
        for run in r.freshness.runs:
            if run.system.startswith("flow"):
                p99 = run.p99_s
                ok = p99 is not None and p99 < TARGET_FRESHNESS_P99_S and run.seen == run.samples
                t[f"{run.system}_freshness_met_at_{run.rate}"] = ok
                aim = ok and p99 is not None and p99 < AIM_FRESHNESS_P99_S
                t[f"{run.system}_freshness_aim_met_at_{run.rate}"] = aim
    if r.queries:
        t["query_p99_max_ms"] = TARGET_QUERY_P99_MS
        for phase, queries in r.queries.phases.items():
            for name, lat in queries.items():
                if name.startswith("flow"):
                    t[f"{name.replace(' ', '_')}_{phase}_met"] = (lat.p99_ms is not None
                                                                  and lat.p99_ms < TARGET_QUERY_P99_MS
                                                                  and not lat.errors)
    if r.memory:
        runs = {(m.name, m.durable): m for m in r.memory.runs}
        b = runs.get(("churn", False))
        if b and len(b.stages) >= 3:
            # from the second hour on (the window has slid once) to the last: flat in the pairs ever seen
            second, last = b.stages[1], b.stages[-1]
            t["memory_churn_rss_ratio"] = round(last["rss_bytes_per_pair"] / second["rss_bytes_per_pair"], 3)
            t["memory_churn_redis_ratio"] = round(last["redis_bytes_per_pair"] / second["redis_bytes_per_pair"], 3)
            t["memory_churn_rss_vs_first_hour"] = round(last["rss_bytes_per_pair"]
                                                        / b.stages[0]["rss_bytes_per_pair"], 3)
            t["memory_flat_met"] = t["memory_churn_rss_ratio"] <= 1.1 and t["memory_churn_redis_ratio"] <= 1.1
    if r.error:
        t["summary_bounds_met"] = all(run.violations == 0 for run in r.error.runs)
    return t

