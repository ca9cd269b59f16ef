"""``rankflow bench-boards``: its configuration, what each part measures, and the targets."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rankflow.bench import rig
from rankflow.bench.rig import Latency, PartsResult

PARTS = ("throughput", "freshness", "memory", "reads", "big")
SYSTEMS = ("baseline", "flow", "flow_durable")
DEFAULT_KEY = "5eed" * 16  # the benchmark's signing key (hex): any key does, the flow checks every sig

TARGET_RATIO = 2.0
TARGET_FRESHNESS_P99_S = 1.0
TARGET_TOP_P99_MS = 10.0
TARGET_PLAYER_P99_MS = 5.0
TARGET_CPU_RATIO = 0.5  # the flow's CPU per result (own + Redis + broker) at most half the baseline's (issue 21)
TARGET_BIG_LOAD_S = 300.0  # 10M players loaded by the durable flow in under 5 minutes (issue 21)

DAY_MS = 86_400_000
MEMORY_DAY_MS = 1_799_107_200_000  # 2027-01-05T00:00:00Z, a Tuesday: one day, one ISO week
GAME = "arena"  # the first game of a generated log (generate_scores), and the memory and big logs' one game


@dataclass
class BoardsBenchConfig:
    results: int = 1_000_000
    players: int = 200_000
    games: int = 4
    partitions: int = 8
    reps: int = 2
    rate: int = 12_000
    steady_s: float = 30.0
    memory_players: int = 1_000_000
    reads_players: int = 1_000_000
    reads_traffic: int = 2_000
    reads_rate: int = 1_000
    reads_s: float = 10.0
    big_players: int = 10_000_000
    big_mode: str = "both"
    big_chunk: int = 50_000
    big_min_free_gib: float = 2.0
    signing_key: str = DEFAULT_KEY
    out: str = "bench-results"
    seed: int = 1
    parts: tuple[str, ...] = ("throughput", "freshness", "memory", "reads")


@dataclass
class Run:
    """One system over the whole backlog."""

    system: str
    order: int
    seconds: float
    results_per_s: float
    peak_rss_bytes: int
    broker_cpu_s: float
    redis_cpu_s: float
    mismatches: int
    redis_used_memory_bytes: int
    cpu_s: float = 0.0  # the system's own process (the flow, or the baseline's consumer)

    def cpu_s_per_1m(self, results: int) -> dict[str, float]:
        """CPU seconds per million results: own, Redis, broker and their sum (what an operator pays)."""
        return rig.cpu_per_million(self.cpu_s, self.redis_cpu_s, self.broker_cpu_s, results)


@dataclass
class Throughput:
    runs: list[Run] = field(default_factory=list)
    median_results_per_s: dict[str, float] = field(default_factory=dict)
    ratio: float = 0.0  # flow / baseline (medians)
    durable_ratio: float = 0.0  # flow durable / baseline: the one that counts
    median_cpu_s_per_1m: dict[str, dict[str, float]] = field(default_factory=dict)  # system -> own, redis, broker, total
    cpu_ratio: float = 0.0  # the flow's total CPU per result / the baseline's (medians)
    durable_cpu_ratio: float = 0.0
    mismatches: int = 0  # over every run
    boards_compared: int = 0
    entries_compared: int = 0
    retention_dropped_boards: int = 0  # on the baseline only: periods docs/semantics/boards.md 7 drops (not mismatches)
    mismatch_examples: list[str] = field(default_factory=list)
    dead_letters: int = 0  # the flow's, on a clean log: must be 0
    wall_s: float = 0.0


@dataclass
class Freshness:
    rate: int = 0
    achieved_rate: float = 0.0
    seconds: float = 0.0
    samples: int = 0
    seen: int = 0
    p50_s: float | None = None
    p99_s: float | None = None
    max_s: float | None = None
    published_p50_s: float | None = None  # by the snapshot's own published_at (stream), before Redis ran the script
    published_p99_s: float | None = None
    wall_s: float = 0.0


@dataclass
class Memory:
    players: int = 0
    entries: int = 0  # board entries (ZCARD over every board)
    redis_bytes_per_entry: float | None = None  # the flow's boards in Redis: used_memory growth / entries
    baseline_redis_bytes_per_entry: float | None = None
    flow_rss_bytes_per_entry: float | None = None  # peak RSS above an empty run's
    flow_durable_rss_bytes_per_entry: float | None = None
    recovery_dir_bytes_per_entry: float | None = None  # on disk, durable run
    rss_empty_bytes: int = 0
    rss_flow_bytes: int = 0
    rss_durable_bytes: int = 0
    recovery_dir_bytes: int = 0
    redis_flow_bytes: int = 0
    redis_baseline_bytes: int = 0
    load_s: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0


@dataclass
class Reads:
    board_players: int = 0
    traffic_rate: int = 0
    rate: int = 0
    seconds: float = 0.0
    top: Latency = field(default_factory=Latency)
    player: Latency = field(default_factory=Latency)
    idle_top: Latency = field(default_factory=Latency)  # the same with the traffic stopped (the flow still runs)
    idle_player: Latency = field(default_factory=Latency)
    cpu_cores: dict[str, dict[str, float]] = field(default_factory=dict)  # phase -> process -> CPU-s per s
    redis_slow: dict[str, dict[str, Any]] = field(default_factory=dict)  # phase -> command -> over 1 ms
    snapshots_during: int = 0  # snapshots the flow published while the readers ran
    http: dict[str, Any] = field(default_factory=dict)  # phase -> query -> Latency of rankflow serve's routes
    http_memory: dict[str, Any] = field(default_factory=dict)  # the same with rankflow serve --board-index memory
    serve_rss_bytes: dict[str, int] = field(default_factory=dict)  # board index -> the server's RSS after the phases
    memory_entries: int = 0  # board entries the memory server holds
    memory_bytes_per_entry: float | None = None  # (RSS memory - RSS redis) / entries
    memory_load_s: float | None = None  # from start until the memory server's mirror served
    memory_loads: int = 0  # whole loads of the boards by the memory server (at the end: 1 if it followed throughout)
    wall_s: float = 0.0


@dataclass
class Big:
    mode: str = ""
    players: int = 0
    loaded_players: int = 0  # how far it got
    entries: int = 0
    complete: bool = False
    load_s: float | None = None
    results_per_s: float | None = None
    redis_used_memory_bytes: int = 0
    redis_bytes_per_entry: float | None = None
    process_peak_rss_bytes: int = 0  # the flow's (flow mode) or this publisher's (redis mode)
    broker_rss_bytes: int = 0
    min_available_bytes: int = 0
    generate_s: float | None = None
    produce_s: float | None = None
    stopped_because: str | None = None
    wall_s: float = 0.0
    flow_cpu_s: float | None = None  # flow mode: the flow's user+sys CPU seconds (sampled until it exits)
    redis_cpu_s: float | None = None  # Redis's CPU seconds during the load
    broker_cpu_s: float | None = None  # flow mode: the broker's, while the flow read from it
    reads_checked: int = 0  # flow mode: answers from the loaded board compared with the log's own ranks
    reads_wrong: int = 0
    read_ms: dict[str, dict[str, float]] = field(default_factory=dict)  # query -> p50_ms, p99_ms (one client)


@dataclass
class BoardsBenchResult(PartsResult):
    throughput: Throughput | None = None
    freshness: Freshness | None = None
    memory: Memory | None = None
    reads: Reads | None = None
    big: Big | None = None  # --big-mode flow
    big_redis: Big | None = None  # --big-mode redis


def targets(r: BoardsBenchResult) -> dict[str, Any]:
    t: dict[str, Any] = {}
    if r.throughput:
        t["throughput_ratio_min"] = TARGET_RATIO
        t["durable_ratio_met"] = r.throughput.durable_ratio >= TARGET_RATIO
        t["ratio_met"] = r.throughput.ratio >= TARGET_RATIO
        t["exact"] = r.throughput.mismatches == 0 and r.throughput.dead_letters == 0
        if r.throughput.cpu_ratio:
            t["cpu_ratio_max"] = TARGET_CPU_RATIO
            t["cpu_ratio_met"] = r.throughput.cpu_ratio <= TARGET_CPU_RATIO
            t["durable_cpu_ratio_met"] = r.throughput.durable_cpu_ratio <= TARGET_CPU_RATIO
    if r.freshness:
        t["freshness_p99_max_s"] = TARGET_FRESHNESS_P99_S
        t["freshness_met"] = r.freshness.p99_s is not None and r.freshness.p99_s < TARGET_FRESHNESS_P99_S
    if r.reads:
        t["top_p99_max_ms"], t["player_p99_max_ms"] = TARGET_TOP_P99_MS, TARGET_PLAYER_P99_MS
        t["top_met"] = (r.reads.top.p99_ms is not None and r.reads.top.p99_ms < TARGET_TOP_P99_MS
                        and not r.reads.top.errors)
        t["player_met"] = (r.reads.player.p99_ms is not None and r.reads.player.p99_ms < TARGET_PLAYER_P99_MS
                           and not r.reads.player.errors)
    if r.big:
        t["big_fits"] = r.big.complete
        t["big_load_max_s"] = TARGET_BIG_LOAD_S
        t["big_load_met"] = r.big.complete and r.big.load_s is not None and r.big.load_s < TARGET_BIG_LOAD_S
    if r.big_redis:
        t["big_redis_fits"] = r.big_redis.complete
    return t
