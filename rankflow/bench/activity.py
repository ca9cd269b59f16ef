"""``rankflow bench-activity``: the activity flow against the seed's design, side by side.

All in one run, on a local Redis and Kafka-protocol broker that this command starts and
stops itself (:class:`rankflow.bench.rig.Rig`); each part can be chosen with ``--parts``:

1. **throughput**: one clean message backlog (``generate --kind messages --clean``: many
   workspaces and channels, Zipf, bots and bursts, in order of ``ts``) produced once to a
   topic (8 partitions by default, keyed by user); the seed's design
   (``rankflow.bench.activity_baseline``: ``ZINCRBY`` + ``EXPIRE`` per message, pipelined;
   ``baseline``), its lean variant (one ``EXPIRE`` per key per batch; ``baseline_lean``), the
   flow (``rankflow run --flow activity --until-eof``) and the flow durable (the same with a
   fresh ``--recovery-dir``) each run it from start to exit as their own process, in
   alternating order, ``--reps`` times each. Median events/s, the ratios flow/baseline, the
   CPU the broker and Redis spent beside each run. Exactness: for a sample of workspaces
   (the busiest and ``--compare-workspaces`` drawn at random) every run's counts over the
   flow's final published window equal a count made from the log. The baseline has no
   watermark: its counts are read over the same buckets.
2. **freshness**: for each ``--rates`` value, messages produced at that steady rate (from a
   child process) for ``--steady-s`` while one system follows the topic. The flow: from a
   message's send to the first published snapshot whose positions include it (a poller
   reads the positions every 10 ms). The baseline: to the first pipeline that applied it
   (its positions, written after the increments) and, for the messages of the busiest
   workspaces, which a reader queries continuously, to the first refresh of the workspace's
   cached union (5 s) that includes it: the seed's "counted in a published ranking".
3. **queries**: each system in turn, alone: it loads the backlog and follows the topic;
   per workspace top 100 and channel lookups (workspaces and channels drawn from the
   window's messages, so busy ones are asked more), each open-loop at ``--queries-rate``
   requests/s for ``--queries-s``: ``ActivityReader.top``/``.channel`` on the flow's Redis,
   and the baseline's read path (``BaselineReader``: the cached ``ZUNIONSTORE`` of 60 buckets,
   ``ZREVRANGE``/``ZSCORE`` + ``ZREVRANK``); first while ``--queries-traffic`` messages/s
   flow in, then with the traffic stopped; a ``GET`` of one key as the control of what
   the machine gives any read meanwhile.
4. **memory**: ``--memory-pairs`` (workspace, channel) pairs active in one hour, one message
   each: bytes per active pair of the flow's peak RSS above an empty run's, of Redis
   ``used_memory``, of the durable run's recovery directory; exact and ``--global-summary
   N``; the baseline's Redis. Then a log where ``--memory-churn`` times as many other pairs
   were active in the hours before, and the same pairs in the last hour: the same figures,
   to show memory follows the active pairs, not the pairs that ever existed.
5. **error**: the flow with ``--global-summary N`` for each ``--summaries`` value on the
   backlog: per global item ``count_high - count_low`` and the true error of ``count_low``
   (true counts from the same run's exact workspace rankings), against ``T / N``
   (docs/semantics/windows.md 5), and how much of the exact global top K the summary lists.
6. **profile** (not in the default parts): py-spy of the flow on the backlog, plain and
   durable: the share of CPU samples of each part of the flow (and flame graphs).

Writes ``activity.json`` and ``activity.png`` to ``--out`` (keeping the parts this run did
not measure from the previous ``activity.json``) and prints a table.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson
import redis

from rankflow.bench.activity_baseline import (BUCKET_MS, WINDOW_BUCKETS, BaselineKeys, BaselineReader, read_clock,
                                              read_positions)
from rankflow.bench.rig import Rig, _cpu_seconds, flush_redis, slowlog_by_command, slowlog_reset, used_memory
from rankflow.connectors.kafka import KafkaEndpoint, ensure_topic, reliable_producer
from rankflow.connectors.redis_generations import current_generation
from rankflow.connectors.redis_keys import Keys, activity_namespace
from rankflow.produce import field_key, produce_file

PARTS = ("throughput", "freshness", "queries", "memory", "error", "profile")
DEFAULT_PARTS = ("throughput", "freshness", "queries", "memory", "error")
SYSTEMS = ("baseline", "baseline_lean", "flow", "flow_durable")

TARGET_RATIO = 2.0
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
class Latency:
    requests: int = 0
    errors: int = 0
    not_found: int = 0
    achieved_rps: float = 0.0
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None


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
class ActivityBenchResult:
    config: dict[str, Any]
    machine: dict[str, Any]
    throughput: Throughput | None = None
    freshness: Freshness | None = None
    queries: Queries | None = None
    memory: Memory | None = None
    error: Error | None = None
    profile: Profile | None = None
    targets: dict[str, Any] = field(default_factory=dict)
    measured: dict[str, dict[str, Any]] = field(default_factory=dict)  # part -> when, wall s, its configuration


# -- helpers -------------------------------------------------------------------------------
def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def busy_cpu_seconds() -> float:
    """CPU-seconds the whole machine spent busy since boot (every process: others' too)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def proc_status(pid: int, field: str) -> int:
    """A ``/proc/PID/status`` size field (``VmRSS``, ``VmHWM``) in bytes; 0 once the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def timed_hwm(cmd: list[str], stderr_path: Path, cpu: list[float] | None = None) -> tuple[float, int]:
    """Run to completion: (seconds, peak RSS); ``cpu`` gets the process's CPU-seconds. The peak is the process's own ``VmHWM``, polled
    every 0.1 s: not ``ru_maxrss``, which on Linux also holds the RSS of the process that
    forked it (this one, with its logs in memory) from before the ``exec``."""
    started = time.perf_counter()
    with open(stderr_path, "wb") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
    peak = 0
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            if cpu is not None:
                cpu.append(usage.ru_utime + usage.ru_stime)
            break
        peak = max(peak, proc_status(proc.pid, "VmHWM"))
        time.sleep(0.1)
    seconds = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])} failed: {stderr_path.read_text(errors='replace')[-2000:]}")
    return seconds, peak


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def read_lines(path: Path, limit: int | None = None) -> list[bytes]:
    out = []
    with open(path, "rb") as f:
        for line in f:
            if limit is not None and len(out) >= limit:
                break
            out.append(line.rstrip(b"\n"))
    return out


def active_pairs_log(path: Path, pairs: int, workspaces: int, hours_before: int, seed: int,
                     start_ms: int = MEMORY_START_MS) -> None:
    """``pairs`` (workspace, channel) pairs with one message each, spread over the last of
    ``hours_before + 1`` hours in random order (``ts`` increasing); in each hour before it,
    as many other pairs (channels ``old<h>-c...`` of the same workspaces) that come and go."""
    rng = random.Random(seed)
    per = -(-pairs // workspaces)
    with open(path, "wb") as f:
        for h in range(hours_before + 1):
            head = "c" if h == hours_before else f"old{h}-c"
            order = list(range(pairs))
            rng.shuffle(order)
            base = start_ms + h * HOUR_MS
            chunk: list[bytes] = []
            for i, p in enumerate(order):
                ws, j = divmod(p, per)
                chunk.append(orjson.dumps({"workspace_id": f"w{ws:05d}", "channel_id": f"{head}{j:05d}",
                                           "user_id": f"u{rng.randrange(100_000):06d}",
                                           "ts": base + i * HOUR_MS // pairs}))
                if len(chunk) >= 50_000:
                    f.write(b"\n".join(chunk) + b"\n")
                    chunk.clear()
            if chunk:
                f.write(b"\n".join(chunk) + b"\n")


class PositionsPoller(threading.Thread):
    """Reads a positions hash (partition -> next offset) every ``interval`` s and keeps when
    each new value was first seen."""

    def __init__(self, redis_url: str, key: str, interval: float = 0.01) -> None:
        super().__init__(name="positions-poller", daemon=True)
        self.client = redis.Redis.from_url(redis_url)
        self.key, self.interval = key, interval
        self.seen: list[tuple[float, dict[str, int]]] = []
        self._last: dict[str, int] | None = None
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.is_set():
            self.poll()
            time.sleep(self.interval)
        self.poll()
        self.client.close()

    def poll(self) -> None:
        raw = self.client.hgetall(self.key)
        positions = {k.decode(): int(v) for k, v in raw.items()}
        if positions and positions != self._last:
            self._last = positions
            self.seen.append((time.time(), positions))

    def total(self) -> int:
        return sum(self.seen[-1][1].values()) if self.seen else 0


def first_covering(snapshots: list[tuple[float, dict[str, int]]], topic: str,
                   samples: dict[tuple[int, int], float]) -> dict[tuple[int, int], float]:
    """For each sample (partition, offset) -> sent at: the time until the first state whose
    positions include it (positions only grow)."""
    import bisect

    by_part: dict[int, tuple[list[int], list[float]]] = {}
    out: dict[tuple[int, int], float] = {}
    for (part, offset), sent_at in samples.items():
        if part not in by_part:
            name = f"{topic}/{part}"
            offsets, times, high = [], [], -1
            for at, positions in snapshots:
                value = positions.get(name, 0)
                if value > high:
                    high = value
                    offsets.append(value)
                    times.append(at)
            by_part[part] = (offsets, times)
        offsets, times = by_part[part]
        i = bisect.bisect_right(offsets, offset)
        if i < len(offsets):
            out[(part, offset)] = times[i] - sent_at
    return out


def _steady_produce(brokers: str, topic: str, path: str, count: int, rate: int, sample_every: int,
                    result_path: str) -> None:
    """A child process: ``count`` lines of ``path`` at ``rate`` a second, keyed by user; writes
    ``{"samples": [[partition, offset, sent_at, line], ...], "seconds", "errors"}``."""
    lines = read_lines(Path(path), count)
    producer = reliable_producer(brokers, **{"linger.ms": 5, "queue.buffering.max.messages": 1_000_000})
    samples: list[list[Any]] = []
    errors = [0]

    def sampled(at: float, i: int):
        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                samples.append([msg.partition(), msg.offset(), at, i])
            else:
                errors[0] += 1
        return delivered

    def counted(err: Any, msg: Any) -> None:
        if err is not None:
            errors[0] += 1

    produce, poll = producer.produce, producer.poll
    start = time.perf_counter()
    for i, line in enumerate(lines):
        if i % 50 == 0:
            ahead = start + i / rate - time.perf_counter()
            if ahead > 0.001:
                time.sleep(ahead)
            poll(0)
        callback = sampled(time.time(), i) if i % sample_every == 0 else counted
        while True:
            try:
                produce(topic, key=field_key(line, "user_id"), value=line, on_delivery=callback)
                break
            except BufferError:
                poll(0.01)
    seconds = time.perf_counter() - start
    producer.flush(120)
    Path(result_path).write_bytes(orjson.dumps({"samples": samples, "seconds": seconds, "errors": errors[0]}))


def produce_lines(brokers: str, topic: str, lines: list[bytes]) -> None:
    """Produce every line, keyed by its user, as fast as the broker takes them (acks=all)."""
    producer = reliable_producer(brokers, **{"linger.ms": 20, "batch.num.messages": 10_000})
    errors: list[Any] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    for i, line in enumerate(lines):
        while True:
            try:
                producer.produce(topic, key=field_key(line, "user_id"), value=line, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
        if i % 5000 == 0:
            producer.poll(0)
    if producer.flush(120) or errors:
        raise RuntimeError(f"producing to {topic} failed: {errors[:3]}")


IDLE_QUERIES_S = 10.0
"""Seconds of each query's load once the traffic stopped (nothing changes then)."""


def _feed(brokers: str, topic: str, path: str, rate: int, stop_at: float) -> None:
    """A child process: steady traffic until ``stop_at`` (wall clock) or the end of ``path``."""
    lines = read_lines(Path(path))
    producer = reliable_producer(brokers, **{"linger.ms": 5})
    start = time.perf_counter()
    for i, line in enumerate(lines):
        if i % 20 == 0:
            if time.time() > stop_at:
                break
            ahead = start + i / rate - time.perf_counter()
            if ahead > 0.001:
                time.sleep(ahead)
            producer.poll(0)
        while True:
            try:
                producer.produce(topic, key=field_key(line, "user_id"), value=line)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(60)


class RefreshReader(threading.Thread):
    """The seed's readers of the busiest workspaces: each read every ``interval`` s through the
    cached union; keeps, per workspace, when a read refreshed the union (the cache had expired)
    and the consumer positions the refresh included (read in the same MULTI)."""

    def __init__(self, redis_url: str, prefix: str, workspaces: list[str], interval: float = 0.1) -> None:
        super().__init__(name="refresh-reader", daemon=True)
        self.client = redis.Redis.from_url(redis_url)
        self.prefix, self.workspaces, self.interval = prefix, workspaces, interval
        self.keys = BaselineKeys(prefix)
        self.clock = 0
        self.reader = BaselineReader(self.client, prefix, now_ms=lambda: self.clock)
        self.refreshes: dict[str, list[tuple[float, dict[str, int]]]] = {ws: [] for ws in workspaces}
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.is_set():
            self.clock = read_clock(self.client, self.prefix) or 0
            for ws in self.workspaces:
                pipe = self.client.pipeline(transaction=True)
                pipe.hgetall(self.keys.positions)
                pipe.exists(self.keys.top(ws))
                self.reader._script(keys=self.reader._keys(ws), args=[self.reader.cache_ms, "top", 100, ""],
                                    client=pipe)
                positions, cached, _ = pipe.execute()
                if not cached:
                    self.refreshes[ws].append((time.time(), {k.decode(): int(v) for k, v in positions.items()}))
            time.sleep(self.interval)
        self.client.close()


def paced_load(make_call: Any, rate: float, seconds: float, threads: int = 8) -> Latency:
    """Open loop: request ``i`` is due at ``start + i / rate``; latency from the due time, so a
    reader that falls behind is charged for the queue. ``call(i)`` returns False for an answer
    that found nothing (counted apart, not an error)."""
    import itertools

    total = int(rate * seconds)
    counter = itertools.count()
    latencies: list[float] = []
    errors, not_found = [0], [0]
    start = time.perf_counter() + 0.2

    def worker() -> None:
        call, close = make_call()
        try:
            while (i := next(counter)) < total:
                due = start + i / rate
                delay = due - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                try:
                    found = call(i)
                except Exception:  # noqa: BLE001 - counted; the load goes on
                    errors[0] += 1
                    continue
                latencies.append(time.perf_counter() - due)
                if found is False:
                    not_found[0] += 1
        finally:
            close()

    pool = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    took = time.perf_counter() - start
    p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
    return Latency(requests=len(latencies), errors=errors[0], not_found=not_found[0],
                   achieved_rps=len(latencies) / took, p50_ms=None if p50 is None else p50 * 1000,
                   p99_ms=None if p99 is None else p99 * 1000, max_ms=max(latencies, default=0.0) * 1000)


class LogIndex:
    """Counts made from a clean log, per (workspace, channel, bucket): the reference."""

    def __init__(self, path: Path, bucket_ms: int = BUCKET_MS) -> None:
        counts: Counter[tuple[str, str, int]] = Counter()
        by_ws: Counter[str] = Counter()
        loads = orjson.loads
        with open(path, "rb") as f:
            for line in f:
                e = loads(line)
                counts[(e["workspace_id"], e["channel_id"], e["ts"] // bucket_ms)] += 1
        self.by_workspace: dict[str, dict[tuple[str, int], int]] = {}
        for (ws, ch, b), n in counts.items():
            self.by_workspace.setdefault(ws, {})[(ch, b)] = n
            by_ws[ws] += n
        self.events = sum(by_ws.values())
        self.busiest = [ws for ws, _ in by_ws.most_common()]
        self.pairs = len({(ws, ch) for ws, chs in self.by_workspace.items() for ch, _ in chs})
        self.buckets = (min(b for (_, _, b) in counts), max(b for (_, _, b) in counts))

    def sample(self, n: int, seed: int) -> list[str]:
        """The 10 busiest workspaces and ``n`` others drawn at random."""
        head = self.busiest[:10]
        rest = sorted(self.busiest[10:])
        return head + random.Random(seed).sample(rest, min(n, len(rest)))

    def window(self, workspace: str, first: int, last: int) -> dict[str, int]:
        out: dict[str, int] = {}
        for (ch, b), n in self.by_workspace.get(workspace, {}).items():
            if first <= b <= last:
                out[ch] = out.get(ch, 0) + n
        return out


def compare(got: dict[str, dict[str, int]], want: dict[str, dict[str, int]]) -> tuple[int, int, list[str]]:
    """(pairs that differ, pairs compared, examples) over the workspaces of ``want``."""
    bad, compared, examples = 0, 0, []
    for ws, channels in want.items():
        mine = got.get(ws, {})
        for ch in set(mine) | set(channels):
            compared += 1
            if mine.get(ch) != channels.get(ch):
                bad += 1
                if len(examples) < 10:
                    examples.append(f"{ws}/{ch}: {mine.get(ch)} (log: {channels.get(ch)})")
    return bad, compared, examples


# -- the bench ----------------------------------------------------------------------------
class ActivityBench:
    def __init__(self, cfg: ActivityBenchConfig) -> None:
        self.cfg = cfg
        self.rig = Rig(cfg.seed)
        self.work = self.rig.work
        self.client: redis.Redis | None = None
        self.data = Path("data")
        self._index: LogIndex | None = None
        self._produced: set[str] = set()

    def log(self, message: str) -> None:
        self.rig.log(message)

    @property
    def redis_url(self) -> str:
        return self.rig.redis.url

    @property
    def brokers(self) -> str:
        return self.rig.broker.url

    # -- commands ---------------------------------------------------------------------
    def flow_cmd(self, topic: str, namespace: str, *extra: str) -> list[str]:
        return [sys.executable, "-m", "rankflow.cli", "run", "--flow", "activity",
                "--input", f"kafka:{self.brokers}/{topic}", "--redis", self.redis_url, "--namespace", namespace,
                "--dead-letter", f"jsonl:{self.work / (namespace + '.dead.jsonl')}",
                *(("--publish-stage", str(self.cfg.publish_stage)) if self.cfg.publish_stage is not None else ()),
                *extra]

    def baseline_cmd(self, topic: str, prefix: str, *extra: str) -> list[str]:
        return [sys.executable, "-m", "rankflow.bench.activity_baseline", "--brokers", self.brokers, "--topic", topic,
                "--redis", self.redis_url, "--prefix", prefix, *extra]

    def command(self, system: str, topic: str, name: str) -> list[str]:
        if system == "baseline":
            return self.baseline_cmd(topic, name)
        if system == "baseline_lean":
            return self.baseline_cmd(topic, name, "--expire", "per-batch")
        extra = ["--until-eof"]
        if system == "flow_durable":
            extra += ["--recovery-dir", str(self.work / f"{name}.recovery")]
        return self.flow_cmd(topic, name, *extra)

    def flush(self) -> None:
        assert self.client is not None
        flush_redis(self.client)

    def used_memory(self) -> int:
        assert self.client is not None
        return used_memory(self.client)

    # -- logs -------------------------------------------------------------------------
    def message_log(self, events: int, rate: float, start_ms: int | None = None) -> Path:
        """A clean, realistic message log (``generate --kind messages --clean``), kept in ``data/``."""
        from rankflow.generate_messages import DEFAULT_START_MS, generate_messages

        cfg = self.cfg
        start = DEFAULT_START_MS if start_ms is None else start_ms
        path = self.data / (f"activity-{events}-{cfg.workspaces}-{cfg.channels}-{cfg.users}-r{rate:g}-s{cfg.seed}"
                            + ("" if start_ms is None else f"-t{start}") + ".jsonl")
        if not path.exists():
            self.log(f"generating {path}")
            tmp = path.with_suffix(".tmp")
            generate_messages(events, cfg.seed, tmp, workspaces=cfg.workspaces, channels=cfg.channels,
                              users=cfg.users, rate=rate, start_ms=start, clean=True)
            tmp.rename(path)
        return path

    def backlog_log(self) -> Path:
        return self.message_log(self.cfg.events, self.cfg.event_rate)

    def index(self) -> LogIndex:
        if self._index is None:
            self.log("counting the backlog (the reference)")
            self._index = LogIndex(self.backlog_log())
        return self._index

    def produce(self, path: Path, topic: str) -> float:
        if topic in self._produced:
            return 0.0
        self.log(f"producing {path} to {topic} ({self.cfg.partitions} partitions)")
        started = time.perf_counter()
        produce_file(str(path), KafkaEndpoint(self.brokers, topic), self.cfg.partitions, progress=False)
        self._produced.add(topic)
        return time.perf_counter() - started

    def backlog_topic(self) -> str:
        self.produce(self.backlog_log(), "backlog")
        return "backlog"

    def topic_messages(self, topic: str) -> int:
        """What the topic holds now: the sum of its partitions' end offsets."""
        from confluent_kafka import Consumer, TopicPartition

        from rankflow.connectors.kafka import topic_partitions

        consumer = Consumer({"bootstrap.servers": self.brokers, "group.id": "bench-ends"})
        try:
            return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                       for p in topic_partitions(self.brokers, topic))
        finally:
            consumer.close()

    # -- reading the flow -------------------------------------------------------------
    def flow_keys(self, namespace: str) -> Keys:
        assert self.client is not None
        ans = activity_namespace(namespace)
        return Keys(ans, current_generation(self.client, ans))

    def flow_snapshot(self, namespace: str) -> dict[str, Any]:
        assert self.client is not None
        raw = self.client.get(self.flow_keys(namespace).snapshot)
        if raw is None:
            raise RuntimeError(f"the flow published nothing in {namespace}")
        return json.loads(raw)

    def flow_counts(self, namespace: str, workspaces: list[str]) -> dict[str, dict[str, int]]:
        assert self.client is not None
        keys = self.flow_keys(namespace)
        slots = {ws.decode(): slot.decode() for ws, slot in self.client.hgetall(keys.workspace_slots).items()}
        pipe = self.client.pipeline(transaction=False)
        for ws in workspaces:
            pipe.zrange(keys.workspace(ws, slots.get(ws, "a")), 0, -1, withscores=True)
        return {ws: {ch.decode(): int(n) for ch, n in entries} for ws, entries in zip(workspaces, pipe.execute())}

    def flow_all_counts(self, namespace: str) -> dict[tuple[str, str], int]:
        assert self.client is not None
        keys = self.flow_keys(namespace)
        workspaces = sorted(ws.decode() for ws in self.client.smembers(keys.workspaces))
        return {(ws, ch): n for ws, chs in self.flow_counts(namespace, workspaces).items() for ch, n in chs.items()}

    def baseline_buckets(self, prefix: str, workspaces: list[str], first: int,
                         last: int) -> dict[str, dict[tuple[str, int], int]]:
        """The baseline's counts per (channel, bucket) of ``workspaces`` over buckets ``first .. last``."""
        assert self.client is not None
        keys = BaselineKeys(prefix)
        pipe = self.client.pipeline(transaction=False)
        for ws in workspaces:
            for b in range(first, last + 1):
                pipe.zrange(keys.bucket(ws, b), 0, -1, withscores=True)
        replies = iter(pipe.execute())
        out: dict[str, dict[tuple[str, int], int]] = {}
        for ws in workspaces:
            mine = out[ws] = {}
            for b in range(first, last + 1):
                for ch, n in next(replies):
                    mine[(ch.decode(), b)] = int(n)
        return out

    def dead_letters(self, namespace: str) -> dict[str, int]:
        """The flow's dead letters by reason. On a clean log only ``expired`` may occur: when the
        source first reads a partition after the watermark (from the partitions it has read)
        passed that partition's oldest events, which docs/semantics/windows.md 2's proviso allows; the final
        window's counts do not depend on it."""
        path = self.work / f"{namespace}.dead.jsonl"
        if not path.exists():
            return {}
        with open(path, "rb") as f:
            return dict(Counter(orjson.loads(line)["reason"] for line in f if line.strip()))

    # -- 1. throughput ----------------------------------------------------------------
    def throughput(self, result: ActivityBenchResult) -> None:
        cfg = self.cfg
        out = result.throughput = Throughput()
        topic = self.backlog_topic()
        index = self.index()
        sample = index.sample(cfg.compare_workspaces, cfg.seed)
        out.log_events, out.pairs_in_log = index.events, index.pairs
        systems = [s for s in SYSTEMS if cfg.durable or s != "flow_durable"]
        window: tuple[int, int] | None = None
        flow_views: list[tuple[Run, dict[str, dict[str, int]]]] = []
        baseline_views: list[tuple[Run, dict[str, dict[tuple[str, int], int]]]] = []
        order = 0
        for rep in range(cfg.reps):
            for system in (systems if rep % 2 == 0 else list(reversed(systems))):
                self.flush()
                name = f"{system}-{rep}"
                before_mem = self.used_memory()
                broker0, redis0 = _cpu_seconds(self.rig.broker.pid()), _cpu_seconds(self.rig.redis.pid())
                cpu: list[float] = []
                seconds, rss = timed_hwm(self.command(system, topic, name), self.work / f"{name}.stderr", cpu)
                run = Run(system, order, seconds, index.events / seconds, rss,
                          _cpu_seconds(self.rig.broker.pid()) - broker0, _cpu_seconds(self.rig.redis.pid()) - redis0,
                          0, self.used_memory() - before_mem, cpu[0])
                order += 1
                if system.startswith("flow"):
                    snap = self.flow_snapshot(name)
                    mine = (snap["window_start"] // BUCKET_MS, snap["window_end"] // BUCKET_MS - 1)
                    if window is not None and mine != window:
                        raise RuntimeError(f"{name}: final window {mine}, an earlier run's {window}")
                    window = mine
                    out.window = [snap["window_start"], snap["window_end"]]
                    out.active_pairs = snap["active_pairs"]
                    run.dead_letters = self.dead_letters(name)
                    out.dead_letters += sum(run.dead_letters.values())
                    out.dead_letters_not_expired += sum(n for r, n in run.dead_letters.items() if r != "expired")
                    flow_views.append((run, self.flow_counts(name, sample)))
                    shutil.rmtree(self.work / f"{name}.recovery", ignore_errors=True)
                else:  # every bucket of the log: the window is known once a flow has run
                    baseline_views.append((run, self.baseline_buckets(name, sample, *index.buckets)))
                out.runs.append(run)
                self.log(f"{system} (rep {rep + 1}): {run.events_per_s:,.0f} events/s ({seconds:.1f} s, its own CPU "
                         f"{run.cpu_s:.1f} s; dead letters {run.dead_letters or 0}; broker "
                         f"{run.broker_cpu_s:.1f} CPU-s, Redis {run.redis_cpu_s:.1f} CPU-s; peak RSS "
                         f"{rss / 2**20:,.0f} MiB)")
        assert window is not None
        first, last = window
        want = {ws: index.window(ws, first, last) for ws in sample}
        views: list[tuple[Run, dict[str, dict[str, int]]]] = list(flow_views)
        for run, buckets in baseline_views:
            counts: dict[str, dict[str, int]] = {}
            for ws, entries in buckets.items():
                mine = counts[ws] = {}
                for (ch, b), n in entries.items():
                    if first <= b <= last:
                        mine[ch] = mine.get(ch, 0) + n
            views.append((run, counts))
        for run, counts in views:
            bad, compared, examples = compare(counts, want)
            run.mismatches = bad
            out.mismatches += bad
            out.pairs_compared = compared
            out.mismatch_examples += [f"{run.system}: {e}" for e in examples][:10 - len(out.mismatch_examples)]
        out.workspaces_compared = len(sample)
        for system in systems:
            out.median_events_per_s[system] = statistics.median(r.events_per_s for r in out.runs if r.system == system)
        m = out.median_events_per_s
        out.ratio, out.ratio_lean = m["flow"] / m["baseline"], m["flow"] / m["baseline_lean"]
        if "flow_durable" in m:
            out.durable_ratio, out.durable_ratio_lean = m["flow_durable"] / m["baseline"], \
                m["flow_durable"] / m["baseline_lean"]
        self.flush()
        self.log(f"medians: {m}; flow/baseline {out.ratio:.2f} (lean {out.ratio_lean:.2f}), durable "
                 f"{out.durable_ratio:.2f} (lean {out.durable_ratio_lean:.2f}); {out.pairs_compared:,} pairs of "
                 f"{out.workspaces_compared} workspaces compared, mismatches {out.mismatches}")

    # -- 2. freshness -----------------------------------------------------------------
    def freshness(self, result: ActivityBenchResult) -> None:
        import multiprocessing

        cfg = self.cfg
        out = result.freshness = Freshness()
        most = int(max(cfg.rates) * cfg.steady_s)
        # event time advances as fast as the wall clock at the highest rate
        path = self.message_log(most, float(max(cfg.rates)))
        lines = read_lines(path, most)
        by_line_ws = [orjson.loads(line)["workspace_id"] for line in lines]
        busiest = [ws for ws, _ in Counter(by_line_ws).most_common(cfg.fresh_read_workspaces)]
        del lines
        ctx = multiprocessing.get_context("spawn")
        for rate in cfg.rates:
            for system in ("flow", *(("flow_durable",) if cfg.durable else ()), "baseline"):
                total = int(rate * cfg.steady_s)
                topic = f"steady-{system}-{rate}"
                ensure_topic(self.brokers, topic, cfg.partitions)
                self.flush()
                run = FreshnessRun(system, rate)
                if system.startswith("flow"):
                    durable = ["--recovery-dir", str(self.work / f"fresh-{rate}.recovery")] \
                        if system == "flow_durable" else []
                    proc = subprocess.Popen(self.flow_cmd(topic, "fresh", *durable), stdout=subprocess.DEVNULL,
                                            stderr=subprocess.PIPE)
                    poller = PositionsPoller(self.redis_url, Keys(activity_namespace("fresh")).positions)
                    refresher = None
                else:
                    proc = subprocess.Popen(self.baseline_cmd(topic, "fresh", "--follow"), stdout=subprocess.DEVNULL,
                                            stderr=subprocess.PIPE)
                    poller = PositionsPoller(self.redis_url, BaselineKeys("fresh").positions)
                    refresher = RefreshReader(self.redis_url, "fresh", busiest)
                poller.start()
                samples_path = self.work / f"samples-{system}-{rate}.json"
                try:
                    if system.startswith("flow"):
                        deadline = time.monotonic() + 60
                        while not poller.seen:
                            if proc.poll() is not None or time.monotonic() > deadline:
                                raise RuntimeError(f"the flow did not start: {proc.stderr.read().decode()[-2000:]}")
                            time.sleep(0.05)
                    else:
                        time.sleep(2.0)  # the consumer is assigned its partitions
                        refresher.start()
                    self.log(f"{system}: producing {total:,} messages at {rate:,}/s")
                    pids = {system: proc.pid, "broker": self.rig.broker.pid(), "redis": self.rig.redis.pid()}
                    cpu0 = {k: _cpu_seconds(p) for k, p in pids.items()}
                    wall0 = time.perf_counter()
                    producer = ctx.Process(target=_steady_produce, args=(
                        self.brokers, topic, str(path), total, rate, max(1, total // 5000), str(samples_path)))
                    producer.start()
                    pids["producer"] = producer.pid
                    cpu0["producer"] = 0.0
                    producer_cpu = 0.0
                    while producer.is_alive():
                        producer_cpu = max(producer_cpu, _cpu_seconds(producer.pid) if producer.pid else 0.0)
                        time.sleep(0.2)
                    producer.join()
                    ended = time.time()
                    deadline = time.monotonic() + 120
                    while poller.total() < total and time.monotonic() < deadline:
                        time.sleep(0.05)
                    if poller.total() >= total:
                        run.caught_up_s = max(0.0, poller.seen[-1][0] - ended)
                    wall = time.perf_counter() - wall0
                    run.cpu_cores = {k: round((_cpu_seconds(p) - cpu0[k]) / wall, 3)
                                     for k, p in pids.items() if k != "producer" and p is not None}
                    run.cpu_cores["producer"] = round(producer_cpu / wall, 3)
                    time.sleep(0.3)
                    if refresher is not None:
                        time.sleep(5.5)  # one more refresh of every read workspace
                finally:
                    poller.stop_event.set()
                    poller.join()
                    if refresher is not None:
                        refresher.stop_event.set()
                        refresher.join()
                    proc.send_signal(signal.SIGINT)
                    try:
                        proc.wait(timeout=60)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                produced = orjson.loads(samples_path.read_bytes())
                run.seconds = produced["seconds"]
                run.achieved_rate = total / produced["seconds"]
                samples = {(p, o): at for p, o, at, _ in produced["samples"]}
                latencies = list(first_covering(poller.seen, topic, samples).values())
                run.samples, run.seen = len(samples), len(latencies)
                run.p50_s, run.p99_s = percentile(latencies, 0.5), percentile(latencies, 0.99)
                run.max_s = max(latencies, default=None)
                if refresher is not None:
                    published = []
                    for ws in busiest:
                        mine = {(p, o): at for p, o, at, i in produced["samples"] if by_line_ws[i] == ws}
                        run.published_samples += len(mine)
                        published += first_covering(refresher.refreshes[ws], topic, mine).values()
                    run.published_p50_s = percentile(published, 0.5)
                    run.published_p99_s = percentile(published, 0.99)
                    run.published_max_s = max(published, default=None)
                out.runs.append(run)
                self.log(f"freshness, {system} at {run.achieved_rate:,.0f}/s: p50 {_fmt(run.p50_s, '.3f')} s, p99 "
                         f"{_fmt(run.p99_s, '.3f')} s ({run.seen} of {run.samples} samples; caught up "
                         f"{_fmt(run.caught_up_s, '.1f')} s after the last message)"
                         + ("" if refresher is None else f"; in a refreshed union p50 "
                            f"{_fmt(run.published_p50_s, '.2f')} s, p99 {_fmt(run.published_p99_s, '.2f')} s "
                            f"({run.published_samples} samples)") + f"; CPU cores {run.cpu_cores}")
        self.flush()

    # -- 3. queries -------------------------------------------------------------------
    def queries(self, result: ActivityBenchResult) -> None:
        """Each system in turn, alone on the machine with its own traffic (two systems
        following the topic at once would measure each one's reads under the other's
        load): it loads the backlog, then answers while messages flow in, then idle."""
        cfg = self.cfg
        out = result.queries = Queries(rate=cfg.queries_rate, seconds=cfg.queries_s, traffic_rate=cfg.queries_traffic,
                                       publish_stage=cfg.publish_stage)
        topic = self.backlog_topic()
        index = self.index()
        for system in ("flow", "baseline"):
            self.flush()
            self._queries_of(system, topic, index, out)
        self.flush()

    def _queries_of(self, system: str, topic: str, index: LogIndex, out: Queries) -> None:
        import multiprocessing

        from rankflow.connectors.activity_read import ActivityReader, NoCount

        cfg = self.cfg
        ns, prefix = "queries", "queries-baseline"
        flow_log = self.work / "queries-flow.log"
        if system == "flow":
            proc = subprocess.Popen(self.flow_cmd(topic, ns), stdout=subprocess.DEVNULL, stderr=flow_log.open("wb"))
        else:
            proc = subprocess.Popen(self.baseline_cmd(topic, prefix, "--follow", "--expire", "per-batch"),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        feeder = None
        stop_clock = threading.Event()
        try:
            assert self.client is not None
            total = self.topic_messages(topic)
            deadline = time.monotonic() + 900
            while True:
                if system == "flow":
                    at = sum(int(v) for v in self.client.hvals(Keys(activity_namespace(ns)).positions))
                else:
                    at = sum(read_positions(self.client, prefix).values())
                if at >= total:
                    break
                if proc.poll() is not None:
                    err = flow_log.read_text()[-2000:] if system == "flow" else proc.stderr.read().decode()[-2000:]
                    raise RuntimeError(f"the {system} stopped while loading: {err}")
                if time.monotonic() > deadline:
                    raise RuntimeError("the backlog did not load in 15 minutes")
                time.sleep(0.5)
            time.sleep(1.0)
            if system == "flow":
                snap = self.flow_snapshot(ns)
                start_ms, end_ms = snap["window_start"], snap["window_end"]
                clock = snap["watermark"]
            else:
                clock = read_clock(self.client, prefix) or 0
                end_ms = (clock // BUCKET_MS + 1) * BUCKET_MS
                start_ms = end_ms - 60 * BUCKET_MS
            self.log(f"{system}: backlog loaded ({total:,} messages); window [{start_ms}, {end_ms})")
            # what readers ask for: the workspaces and channels of the window's messages (busy ones more often)
            rng = random.Random(cfg.seed)
            asked = [(ws, ch) for ws, chs in index.by_workspace.items() for (ch, b), n in chs.items()
                     if start_ms // BUCKET_MS <= b < end_ms // BUCKET_MS for _ in range(n)]
            asked = rng.sample(asked, min(20_000, len(asked)))
            out.workspaces_asked = len({ws for ws, _ in asked})
            # traffic: the same kind of log, after what the topic holds, event time at the wall clock's pace
            traffic_n = int(cfg.queries_traffic * (cfg.queries_s * 3 + 30))
            traffic = self.message_log(traffic_n, float(cfg.queries_traffic), start_ms=clock + 1)
            holder = {"clock": clock}

            def follow_clock() -> None:  # the baseline's "now": its consumer's clock
                c = redis.Redis.from_url(self.redis_url)
                while not stop_clock.wait(0.5):
                    holder["clock"] = read_clock(c, prefix) or holder["clock"]
                c.close()

            def reader(query: str):
                def make():
                    client = redis.Redis.from_url(self.redis_url)
                    if system == "flow":
                        flow = ActivityReader(client, ns)

                        def call(i: int) -> bool:
                            ws, ch = asked[i % len(asked)]
                            if query == "top":
                                return bool(flow.top(ws, 100)["items"])
                            try:
                                flow.channel(ws, ch)
                                return True
                            except NoCount:
                                return False
                        return call, client.close
                    base = BaselineReader(client, prefix, now_ms=lambda: holder["clock"])

                    def call(i: int) -> bool:
                        ws, ch = asked[i % len(asked)]
                        if query == "top":
                            return bool(base.top(ws, 100))
                        return base.channel(ws, ch) is not None
                    return call, client.close
                return make

            def control_reader():  # what any read gets from this Redis on this machine meanwhile
                client = redis.Redis.from_url(self.redis_url)
                key = Keys(activity_namespace(ns)).snapshot_id

                def call(i: int) -> bool:
                    return client.get(key) is not None
                return call, client.close

            if system == "baseline":
                threading.Thread(target=follow_clock, daemon=True).start()
            # The readers share this process with the log's index (millions of objects): a full
            # collection of those would stall every reader, which measures this process, not Redis.
            gc.collect()
            gc.freeze()
            ctx = multiprocessing.get_context("spawn")
            feeder = ctx.Process(target=_feed, args=(self.brokers, topic, str(traffic), cfg.queries_traffic,
                                                     time.time() + cfg.queries_s * 3 + 25), daemon=True)
            feeder.start()
            time.sleep(3.0)
            pids = {system: proc.pid, "broker": self.rig.broker.pid(), "redis": self.rig.redis.pid(),
                    "feeder": feeder.pid, "bench (readers)": os.getpid()}
            control = "control GET" if system == "flow" else "control GET, baseline's turn"
            seen = len(flow_log.read_text().splitlines()) if system == "flow" else 0
            for phase in ("traffic", "idle"):
                if phase == "idle":
                    feeder.terminate()
                    feeder.join(10)
                    del pids["feeder"]
                    time.sleep(3.0)
                self._slowlog_reset()
                cpu0 = {k: _cpu_seconds(p) for k, p in pids.items() if p is not None}
                busy0 = busy_cpu_seconds()
                wall0 = time.perf_counter()
                got = out.phases.setdefault(phase, {})
                seconds = cfg.queries_s if phase == "traffic" else min(cfg.queries_s, IDLE_QUERIES_S)
                for name, make in ((f"{system} top", reader("top")), (f"{system} channel", reader("channel")),
                                   (control, control_reader)):
                    got[name] = latency = paced_load(make, cfg.queries_rate, seconds)
                    self.log(f"{phase}, {name}: {latency.achieved_rps:,.0f} req/s, p50 {_fmt(latency.p50_ms, '.2f')} "
                             f"ms, p99 {_fmt(latency.p99_ms, '.2f')} ms, max {_fmt(latency.max_ms, '.1f')} ms, "
                             f"{latency.errors} errors, {latency.not_found} found nothing")
                wall = time.perf_counter() - wall0
                key = phase if system == "flow" else f"{phase}, baseline's turn"
                out.cpu_cores[key] = {k: round((_cpu_seconds(p) - cpu0[k]) / wall, 3)
                                      for k, p in pids.items() if k in cpu0}
                out.cpu_cores[key]["machine (every process, others' too)"] = round(
                    (busy_cpu_seconds() - busy0) / wall, 3)
                out.redis_slow[key] = self._slowlog()
                self.log(f"{key}: CPU cores {out.cpu_cores[key]}; Redis commands over 1 ms {out.redis_slow[key]}")
                if system == "flow":  # what the publisher did meanwhile (its log: staged, or in a hurry)
                    lines = flow_log.read_text().splitlines()
                    out.flow_publishes[phase] = [ln.split("] ", 1)[-1] for ln in lines[seen:]
                                                 if "rankflow.publisher" in ln]
                    seen = len(lines)
                    self.log(f"{phase}: the flow's publisher: {out.flow_publishes[phase] or 'nothing staged'}")
        finally:
            gc.unfreeze()
            stop_clock.set()
            if feeder is not None and feeder.is_alive():
                feeder.terminate()
                feeder.join(10)
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()

    def _slowlog_reset(self) -> None:
        assert self.client is not None
        slowlog_reset(self.client)

    def _slowlog(self) -> dict[str, Any]:
        """Commands that kept Redis busy over 1 ms since the reset, by script or command."""
        from rankflow.bench.activity_baseline import READ_LUA
        from rankflow.connectors.redis_scripts import (ACTIVITY_READ_LUA, DROP_ACTIVITY_LUA, PUBLISH_ACTIVITY_LUA,
                                                       STAGE_ACTIVITY_LUA)

        assert self.client is not None
        return slowlog_by_command(self.client, {PUBLISH_ACTIVITY_LUA: "EVALSHA (flow publish)",
                                                STAGE_ACTIVITY_LUA: "EVALSHA (flow staging)",
                                                DROP_ACTIVITY_LUA: "EVALSHA (flow freeing staged slots)",
                                                ACTIVITY_READ_LUA: "EVALSHA (flow query)",
                                                READ_LUA: "EVALSHA (baseline query: ZUNIONSTORE when stale)"})

    # -- 4. memory --------------------------------------------------------------------
    def memory(self, result: ActivityBenchResult) -> None:
        cfg = self.cfg
        out = result.memory = Memory(pairs=cfg.memory_pairs, workspaces=cfg.memory_workspaces, churn=cfg.memory_churn,
                                     summary=cfg.memory_summary)
        logs = {}
        for hours_before in (0, cfg.memory_churn):
            path = self.data / f"activity-memory-{cfg.memory_pairs}-{cfg.memory_workspaces}-c{hours_before}" \
                               f"-s{cfg.seed}.jsonl"
            if not path.exists():
                self.log(f"generating {path}")
                active_pairs_log(path.with_suffix(".tmp"), cfg.memory_pairs, cfg.memory_workspaces, hours_before,
                                 cfg.seed)
                path.with_suffix(".tmp").rename(path)
            logs[hours_before] = path
            self.produce(path, f"memory-{hours_before}")
        empty = self.work / "empty.jsonl"
        active_pairs_log(empty, 1, 1, 0, cfg.seed)
        produce_file(str(empty), KafkaEndpoint(self.brokers, "empty"), cfg.partitions, progress=False)
        self.flush()
        _, out.rss_empty_bytes, _ = self.footprint(self.flow_cmd("empty", "mem-empty"), "mem-empty", 1)
        plan: list[tuple[str, int, bool, list[str]]] = [("exact", 0, False, [])]
        if cfg.memory_durable:
            plan.append(("exact", 0, True, []))
        if cfg.memory_summary:
            plan.append(("summary", 0, False, ["--global-summary", str(cfg.memory_summary)]))
        plan.append(("baseline", 0, False, []))
        if cfg.memory_churn:
            plan.append(("churn", cfg.memory_churn, False, []))
            if cfg.memory_durable:
                plan.append(("churn", cfg.memory_churn, True, []))
            plan.append(("baseline_churn", cfg.memory_churn, False, []))
        for name, hours_before, durable, extra in plan:
            self.flush()
            topic = f"memory-{hours_before}"
            events = cfg.memory_pairs * (hours_before + 1)
            run = MemoryRun(name, durable, pairs_ever=events, events=events)
            ns = f"mem-{name}-{'durable' if durable else 'plain'}"
            before = self.used_memory()
            if name == "churn":
                keep = self.work / f"{ns}.recovery"
                run.stages = self.staged(ns, logs[hours_before], cfg.memory_pairs, hours_before + 1,
                                         keep if durable else None, out.rss_empty_bytes, before)
                last = run.stages[-1]
                run.seconds = sum(st["seconds"] for st in run.stages)
                run.active_pairs, run.rss_end_bytes = last["active_pairs"], last["rss_bytes"]
                run.peak_rss_bytes = max(st["peak_rss_bytes"] for st in run.stages)
                run.redis_bytes, run.recovery_dir_bytes = last["redis_bytes"], last["recovery_dir_bytes"]
                run.rss_bytes_per_pair = last["rss_bytes_per_pair"]
                run.peak_rss_bytes_per_pair = (run.peak_rss_bytes - out.rss_empty_bytes) / max(run.active_pairs, 1)
                if durable:
                    run.recovery_dir_bytes_per_pair = last["recovery_dir_bytes_per_pair"]
                    shutil.rmtree(keep, ignore_errors=True)
            elif name.startswith("baseline"):
                run.seconds, _ = timed_hwm(self.baseline_cmd(topic, ns, "--expire", "per-batch"),
                                           self.work / f"{ns}.stderr")
                run.redis_bytes = self.used_memory() - before
                run.active_pairs = cfg.memory_pairs
                run.redis_window_bytes_per_pair = self._baseline_window_bytes(ns) / run.active_pairs
            else:
                keep = self.work / f"{ns}.recovery"
                cmd = self.flow_cmd(topic, ns, *extra, *(["--recovery-dir", str(keep)] if durable else []))
                run.seconds, run.rss_end_bytes, run.peak_rss_bytes = self.footprint(cmd, ns, events)
                run.redis_bytes = self.used_memory() - before
                run.active_pairs = self.flow_snapshot(ns)["active_pairs"]
                run.rss_bytes_per_pair = (run.rss_end_bytes - out.rss_empty_bytes) / max(run.active_pairs, 1)
                run.peak_rss_bytes_per_pair = (run.peak_rss_bytes - out.rss_empty_bytes) / max(run.active_pairs, 1)
                if durable:
                    run.recovery_dir_bytes = dir_bytes(keep)
                    run.recovery_dir_bytes_per_pair = run.recovery_dir_bytes / max(run.active_pairs, 1)
                    shutil.rmtree(keep, ignore_errors=True)
            run.redis_bytes_per_pair = run.redis_bytes / max(run.active_pairs, 1)
            out.runs.append(run)
            self.log(f"memory, {name}{' durable' if durable else ''}: {events:,} messages, {run.pairs_ever:,} pairs "
                     f"ever, {run.active_pairs:,} active, {run.seconds:.1f} s; per active pair: RSS "
                     f"{_fmt(run.rss_bytes_per_pair, ',.0f')} B (peak {_fmt(run.peak_rss_bytes_per_pair, ',.0f')} B), "
                     f"Redis {_fmt(run.redis_bytes_per_pair, ',.0f')} B"
                     + (f" (window keys {run.redis_window_bytes_per_pair:,.0f} B)"
                        if run.redis_window_bytes_per_pair is not None else "")
                     + (f", recovery dir {run.recovery_dir_bytes_per_pair:,.0f} B" if durable else ""))
        self.flush()

    def staged(self, namespace: str, path: Path, pairs: int, hours: int, keep: Path | None, rss_empty: int,
               redis_before: int) -> list[dict[str, Any]]:
        """The churn log fed one hour at a time to a live flow: after each hour is published,
        with nothing left to read, its RSS, Redis and recovery directory (a reading with the
        rest of the log in the topic would hold the Kafka client's read-ahead too)."""
        assert self.client is not None
        topic = f"staged-{namespace}"
        ensure_topic(self.brokers, topic, self.cfg.partitions)
        cmd = self.flow_cmd(topic, namespace, *(["--recovery-dir", str(keep)] if keep is not None else []))
        key = Keys(activity_namespace(namespace)).positions
        with open(self.work / f"{namespace}.stderr", "wb") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        stages: list[dict[str, Any]] = []
        try:
            with open(path, "rb") as f:
                for hour in range(hours):
                    lines = [f.readline().rstrip(b"\n") for _ in range(pairs)]
                    started = time.perf_counter()
                    produce_lines(self.brokers, topic, lines)
                    del lines
                    deadline, peak = time.monotonic() + 1800, 0
                    while sum(int(v) for v in self.client.hvals(key)) < (hour + 1) * pairs:
                        if proc.poll() is not None or time.monotonic() > deadline:
                            raise RuntimeError(f"the flow stopped: "
                                               f"{(self.work / f'{namespace}.stderr').read_text()[-2000:]}")
                        peak = max(peak, proc_status(proc.pid, "VmHWM"))
                        time.sleep(0.1)
                    seconds = time.perf_counter() - started
                    time.sleep(2.0)
                    active = self.flow_snapshot(namespace)["active_pairs"]
                    st = {"hour": hour, "pairs_ever": (hour + 1) * pairs, "active_pairs": active, "seconds": seconds,
                          "rss_bytes": proc_status(proc.pid, "VmRSS"),
                          "peak_rss_bytes": max(peak, proc_status(proc.pid, "VmHWM")),
                          "redis_bytes": self.used_memory() - redis_before,
                          "recovery_dir_bytes": dir_bytes(keep) if keep is not None else 0}
                    st["rss_bytes_per_pair"] = (st["rss_bytes"] - rss_empty) / max(active, 1)
                    st["redis_bytes_per_pair"] = st["redis_bytes"] / max(active, 1)
                    st["recovery_dir_bytes_per_pair"] = st["recovery_dir_bytes"] / max(active, 1)
                    stages.append(st)
                    self.log(f"  hour {hour}: {st['pairs_ever']:,} pairs ever, {active:,} active: RSS "
                             f"{st['rss_bytes_per_pair']:,.0f} B, Redis {st['redis_bytes_per_pair']:,.0f} B, "
                             f"recovery dir {st['recovery_dir_bytes_per_pair']:,.0f} B per active pair")
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return stages

    def footprint(self, cmd: list[str], namespace: str, events: int) -> tuple[float, int, int]:
        """Run the flow live until it has published all ``events`` messages of its topic, wait
        2 s, read its RSS, and stop it (SIGINT: its last barrier, recovery state written).
        (seconds until published, RSS then, peak RSS). A run with ``--until-eof`` exits as
        soon as it is done; live, its footprint once nothing is left to read is measurable
        (the peak also holds the Kafka client's read-ahead of the messages still to come)."""
        assert self.client is not None
        key = Keys(activity_namespace(namespace)).positions
        started = time.perf_counter()
        with open(self.work / f"{namespace}.stderr", "wb") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        peak = 0
        try:
            deadline = time.monotonic() + 3600
            while sum(int(v) for v in self.client.hvals(key)) < events:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the flow did not publish {events:,} messages: "
                                       f"{(self.work / f'{namespace}.stderr').read_text(errors='replace')[-2000:]}")
                peak = max(peak, proc_status(proc.pid, "VmHWM"))
                time.sleep(0.1)
            seconds = time.perf_counter() - started
            time.sleep(2.0)
            rss, peak = proc_status(proc.pid, "VmRSS"), max(peak, proc_status(proc.pid, "VmHWM"))
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return seconds, rss, peak

    def _baseline_window_bytes(self, prefix: str) -> int:
        """``MEMORY USAGE`` of the baseline's keys in its window (the 60 buckets ending at its clock):
        what it holds live, once the TTLs of older buckets have run (a replay does not wait for them)."""
        assert self.client is not None
        clock = read_clock(self.client, prefix)
        if clock is None:
            return 0
        last = clock // BUCKET_MS
        total = 0
        head = f"{prefix}:active:"
        batch: list[str] = []

        def flush_batch() -> int:
            pipe = self.client.pipeline(transaction=False)
            for k in batch:
                pipe.memory_usage(k, samples=0)
            got = sum(x or 0 for x in pipe.execute())
            batch.clear()
            return got

        for key in self.client.scan_iter(match=head + "*", count=2000):
            b = key.decode().rsplit(":", 1)[1]
            if b.isdigit() and last - WINDOW_BUCKETS < int(b) <= last:
                batch.append(key)
                if len(batch) >= 5000:
                    total += flush_batch()
        if batch:
            total += flush_batch()
        return total

    # -- 5. error ---------------------------------------------------------------------
    def error(self, result: ActivityBenchResult) -> None:
        cfg = self.cfg
        out = result.error = Error()
        topic = self.backlog_topic()
        for n in cfg.summaries:
            self.flush()
            ns = f"error-{n}"
            seconds, _ = timed_hwm(self.flow_cmd(topic, ns, "--until-eof", "--global-summary", str(n)),
                                   self.work / f"{ns}.stderr")
            snap = self.flow_snapshot(ns)
            true = self.flow_all_counts(ns)  # the workspace rankings stay exact (docs/semantics/windows.md 5)
            total = sum(true.values())
            items = snap["global"]
            k = len(items)
            run = ErrorRun(n=n, total=total, bound=total / n, items=k, k=k, seconds=seconds,
                           events_per_s=self.index().events / seconds)
            widths, errors, relative = [], [], []
            for item in items:
                pair = (item["workspace_id"], item["channel_id"])
                low, high, count = item["count_low"], item["count_high"], true.get(pair, 0)
                widths.append(high - low)
                errors.append(count - low)
                relative.append((count - low) / count if count else 0.0)
                run.error_high_max = max(run.error_high_max, high - count)
                if not (low <= count <= high) or high - low > total / n:
                    run.violations += 1
            run.exact_items = sum(w == 0 for w in widths)
            run.width_max, run.width_mean = max(widths, default=0), statistics.fmean(widths) if widths else 0.0
            run.error_low_max = max(errors, default=0)
            run.error_low_mean = statistics.fmean(errors) if errors else 0.0
            run.error_low_max_relative = max(relative, default=0.0)
            exact = sorted(true.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:k]
            listed = {(i["workspace_id"], i["channel_id"]) for i in items}
            run.recall_top_k = sum(pair in listed for pair, _ in exact) / max(k, 1)
            out.runs.append(run)
            self.log(f"error, --global-summary {n}: T {total:,}, T/N {run.bound:,.1f}; count_high - count_low max "
                     f"{run.width_max:,} (mean {run.width_mean:,.1f}); true - count_low max {run.error_low_max:,} "
                     f"({run.error_low_max_relative:.2%}); {run.exact_items} of {k} items exact; exact top {k} "
                     f"listed {run.recall_top_k:.0%}; {run.violations} violations; {run.events_per_s:,.0f} events/s")
        self.flush()

    # -- 6. profile -------------------------------------------------------------------
    def profile(self, result: ActivityBenchResult) -> None:
        out = result.profile = Profile()
        topic = self.backlog_topic()
        spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        dest = Path(self.cfg.out)
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("plain", "durable"):
            extra = ["--recovery-dir", str(self.work / "profile.recovery")] if name == "durable" else []
            if name == "durable" and not self.cfg.durable:
                continue
            for fmt, suffix in (("flamegraph", "svg"), ("raw", "txt")):
                self.flush()
                shutil.rmtree(self.work / "profile.recovery", ignore_errors=True)
                cmd = self.flow_cmd(topic, f"prof-{name}-{fmt}", "--until-eof", *extra)
                started = time.perf_counter()
                proc = subprocess.Popen([spy, "record", "--native", "-r", "100", "-f", fmt,
                                         "-o", str(dest / f"profile-activity-{name}.{suffix}"), "--", *cmd],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                _, status, usage = os.wait4(proc.pid, 0)
                if os.waitstatus_to_exitcode(status) != 0:
                    raise RuntimeError(proc.stderr.read().decode()[-2000:])
                out.seconds[name] = time.perf_counter() - started
                out.cpu_s[name] = usage.ru_utime + usage.ru_stime
            out.shares[name] = profile_shares(dest / f"profile-activity-{name}.txt")
            self.log(f"profile {name} ({out.seconds[name]:.1f} s under py-spy): " +
                     ", ".join(f"{p} {s:.0%}" for p, s in out.shares[name].items()))

    # -- all --------------------------------------------------------------------------
    def run(self) -> ActivityBenchResult:
        cfg = self.cfg
        unknown = set(cfg.parts) - set(PARTS)
        if unknown:
            raise ValueError(f"unknown parts {sorted(unknown)}: choose from {', '.join(PARTS)}")
        result = ActivityBenchResult(config=asdict(cfg), machine={
            "cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
            "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")})
        self.data.mkdir(exist_ok=True)
        try:
            with self.rig:
                self.client = self.rig.client
                for part in PARTS:
                    if part not in cfg.parts:
                        continue
                    started = time.perf_counter()
                    load_before, busy_before = os.getloadavg(), busy_cpu_seconds()
                    getattr(self, part)(result)
                    wall = time.perf_counter() - started
                    getattr(result, part).wall_s = wall
                    result.measured[part] = {"at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                             "wall_s": round(wall, 1),
                                             "loadavg_before_after": [load_before, os.getloadavg()],
                                             "machine_busy_cores": round((busy_cpu_seconds() - busy_before) / wall, 2),
                                             "commit": _commit(), "config": asdict(cfg)}
                    self.log(f"{part}: {wall:.0f} s wall")
        finally:
            shutil.rmtree(self.work, ignore_errors=True)
        result.targets = targets(result)
        return result


PROFILE_PARTS = {  # a frame whose name contains a key counts for the part (innermost first, first match wins)
    "garbage collector": ("gc_collect_main",),
    "recovery: the counters' state and changes (WindowTable.state, _changes, _image)": (
        "WindowCounts.state", "WindowTable.state", "Watermark.state", "ActivityRanking.state", "CounterLogic.snapshot",
        "MergerLogic.snapshot", "WindowTable._changes", "WindowTable._image", "_nested", "take_dirty",
        "_summary_json", "_merge_bucket"),
    "changelog (write, fdatasync)": ("ShardChangelog", "changelog", "fdatasync"),
    "parse (JSON, validation)": ("parse_message_records", "parse_message", "ParsedBatch"),
    "routing to counter partitions (route_messages)": ("route_messages",),
    "window counter: place and count (WindowTable, WindowCounts)": ("_place", "WindowCounts", "Watermark",
                                                                    "_summarize", "MisraGries"),
    "window counter: local top (CountTop; before 033227b an index of every pair)": ("CountTop", "SongIndex",
                                                                                     "PairIndex", "set_counts",
                                                                                     "ranking_index", "SortedList"),
    "window counter: report (changes by workspace)": ("by_workspace", "WindowTable", "take_changed"),
    "merger (global top, snapshot)": ("ActivityRanking", "MergerLogic", "merge_local_tops", "ActivitySnapshot",
                                      "merger"),
    "publisher: changes to script args (ActivityState)": ("ActivityState",),
    "publisher: redis-py (pack, send, wait)": ("Publisher", "hiredis"),
    "Bytewax recovery store (pickle, SQLite)": ("sqlite", "rusqlite", "pickle", "Pickler", "snapshot"),
    "Kafka read": ("_KafkaPartition", "rd_kafka"),
    "start-up (imports)": ("_find_and_load", "_compile_bytecode"),
}
PROFILE_GENERIC = {"parse (JSON, validation)": ("orjson",), "publisher: redis-py (pack, send, wait)": ("redis/",)}
PROFILE_IDLE = ("Condition.wait", "Queue.get", "Event.wait", "time_sleep", "poll (libc")


def profile_shares(collapsed: Path) -> dict[str, float]:
    """Shares of a py-spy ``raw`` profile's busy samples by part of the flow."""
    counts: Counter[str] = Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        frames = [f for f in stack.split(";")[::-1] if not f.startswith("process ")]
        if any(idle in f for f in frames for idle in PROFILE_IDLE):
            continue
        total += int(n)
        part = next((name for frame in frames for name, keys in PROFILE_PARTS.items() if any(k in frame for k in keys)),
                    None) or next((name for frame in frames for name, keys in PROFILE_GENERIC.items()
                                   if any(k in frame for k in keys)), "Bytewax runtime and the rest")
        counts[part] += int(n)
    return {part: round(n / total, 4) for part, n in counts.most_common()} if total else {}


def _commit() -> str | None:
    """The checkout's commit, ``+dirty`` with uncommitted changes."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, check=True).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def targets(r: ActivityBenchResult) -> dict[str, Any]:
    t: dict[str, Any] = {}
    if r.throughput:
        t["throughput_ratio_min"] = TARGET_RATIO
        t["ratio_met"] = r.throughput.ratio_lean >= TARGET_RATIO and r.throughput.ratio >= TARGET_RATIO
        t["durable_ratio_met"] = (r.throughput.durable_ratio_lean >= TARGET_RATIO
                                  and r.throughput.durable_ratio >= TARGET_RATIO)
        t["exact"] = r.throughput.mismatches == 0 and r.throughput.dead_letters_not_expired == 0
    if r.freshness:
        t["freshness_p99_max_s"], t["freshness_p99_aim_s"] = TARGET_FRESHNESS_P99_S, AIM_FRESHNESS_P99_S
        for run in r.freshness.runs:
            if run.system.startswith("flow"):
                ok = run.p99_s is not None and run.p99_s < TARGET_FRESHNESS_P99_S and run.seen == run.samples
                t[f"{run.system}_freshness_met_at_{run.rate}"] = ok
                aim = ok and run.p99_s < AIM_FRESHNESS_P99_S  # type: ignore[operator]
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


# -- output ----------------------------------------------------------------------------------
def from_json(data: dict[str, Any]) -> ActivityBenchResult:
    """A result written by :func:`write_outputs`, back as dataclasses."""
    def part(cls: Any, d: dict[str, Any] | None) -> Any:
        if d is None:
            return None
        d = dict(d)
        if cls is Throughput:
            d["runs"] = [Run(**x) for x in d.get("runs", [])]
        elif cls is Freshness:
            d["runs"] = [FreshnessRun(**x) for x in d.get("runs", [])]
        elif cls is Queries:
            d["phases"] = {p: {q: Latency(**lat) for q, lat in qs.items()} for p, qs in d.get("phases", {}).items()}
        elif cls is Memory:
            d["runs"] = [MemoryRun(**x) for x in d.get("runs", [])]
        elif cls is Error:
            d["runs"] = [ErrorRun(**x) for x in d.get("runs", [])]
        return cls(**d)

    return ActivityBenchResult(config=data.get("config", {}), machine=data.get("machine", {}),
                               throughput=part(Throughput, data.get("throughput")),
                               freshness=part(Freshness, data.get("freshness")),
                               queries=part(Queries, data.get("queries")), memory=part(Memory, data.get("memory")),
                               error=part(Error, data.get("error")), profile=part(Profile, data.get("profile")),
                               targets=data.get("targets", {}), measured=data.get("measured", {}))


def merge_previous(result: ActivityBenchResult, json_path: Path) -> ActivityBenchResult:
    """Parts this run did not measure are kept from the previous ``activity.json`` (each part
    says when, on which commit and with which configuration it was measured)."""
    if not json_path.exists():
        return result
    try:
        previous = from_json(json.loads(json_path.read_text()))
    except (ValueError, TypeError, KeyError):
        return result
    for name in PARTS:
        if getattr(result, name) is None and getattr(previous, name) is not None:
            setattr(result, name, getattr(previous, name))
            if name in previous.measured:
                result.measured[name] = previous.measured[name]
    result.targets = targets(result)
    return result


def write_outputs(result: ActivityBenchResult, out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    json_path, png_path = out / "activity.json", out / "activity.png"
    result = merge_previous(result, json_path)
    json_path.write_text(json.dumps(asdict(result), indent=2) + "\n")
    chart(result, png_path)
    return json_path, png_path


def _fmt(value: float | None, spec: str, unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def _met(ok: bool | None) -> str:
    return "met" if ok else "MISSED"


def rows(r: ActivityBenchResult) -> list[tuple[str, str, str, str]]:
    """(what, flow, baseline, target) rows of the summary table."""
    out: list[tuple[str, str, str, str]] = []
    t = r.targets
    if r.throughput:
        th, m = r.throughput, r.throughput.median_events_per_s
        runs = lambda s: " / ".join(f"{x.events_per_s:,.0f}" for x in th.runs if x.system == s)  # noqa: E731
        durable = f"; durable {m['flow_durable']:,.0f} ({runs('flow_durable')})" if "flow_durable" in m else ""
        out.append((f"events/s, {th.log_events:,}-message backlog, {r.config.get('partitions')} partitions "
                    f"(median; each run)",
                    f"{m['flow']:,.0f} ({runs('flow')}){durable}",
                    f"seed {m['baseline']:,.0f} ({runs('baseline')}); lean {m['baseline_lean']:,.0f} "
                    f"({runs('baseline_lean')})",
                    f"flow/seed {th.ratio:.2f}, /lean {th.ratio_lean:.2f}; durable {th.durable_ratio:.2f}, "
                    f"/lean {th.durable_ratio_lean:.2f} (>= {TARGET_RATIO:g}): plain {_met(t.get('ratio_met'))}, "
                    f"durable {_met(t.get('durable_ratio_met'))}"))
        def per_message(system: str, what: str) -> str:
            values = [getattr(x, what) for x in th.runs if x.system == system]
            return f"{statistics.median(values) / max(th.log_events, 1) * 1e6:.1f}" if values else "-"

        if any(x.cpu_s for x in th.runs):
            out.append(("CPU per message, us (median): its own process + Redis",
                        f"{per_message('flow', 'cpu_s')} + {per_message('flow', 'redis_cpu_s')}; durable "
                        f"{per_message('flow_durable', 'cpu_s')} + {per_message('flow_durable', 'redis_cpu_s')}",
                        f"seed {per_message('baseline', 'cpu_s')} + {per_message('baseline', 'redis_cpu_s')}; lean "
                        f"{per_message('baseline_lean', 'cpu_s')} + {per_message('baseline_lean', 'redis_cpu_s')}",
                        ""))
        out.append(("exactness: window counts of sampled workspaces vs a count of the log",
                    f"{th.mismatches} mismatches over {len(th.runs)} runs ({th.workspaces_compared} workspaces, "
                    f"{th.pairs_compared:,} pairs each; {th.active_pairs:,} active pairs of {th.pairs_in_log:,}); "
                    f"{th.dead_letters:,} dead letters, all but {th.dead_letters_not_expired} expired ("
                    + ", ".join(f"{x.system} {sum(x.dead_letters.values()):,}" for x in th.runs
                                if x.system.startswith("flow")) + ")", "the same window's buckets",
                    "0: " + _met(t.get("exact"))))
    if r.freshness:
        for f in r.freshness.runs:
            if f.system.startswith("flow"):
                out.append((f"freshness{' (durable)' if f.system == 'flow_durable' else ''} at "
                            f"{f.achieved_rate:,.0f} events/s (produced -> in a published snapshot)",
                            f"p50 {_fmt(f.p50_s, '.2f', ' s')}, p99 {_fmt(f.p99_s, '.2f', ' s')}, max "
                            f"{_fmt(f.max_s, '.2f', ' s')} ({f.seen} of {f.samples} samples; caught up "
                            f"{_fmt(f.caught_up_s, '.1f', ' s')} after the last)", "",
                            f"p99 < {TARGET_FRESHNESS_P99_S:g} s: "
                            f"{_met(t.get(f'{f.system}_freshness_met_at_{f.rate}'))}; aim {AIM_FRESHNESS_P99_S:g} s: "
                            f"{_met(t.get(f'{f.system}_freshness_aim_met_at_{f.rate}'))}"))
            else:
                out.append((f"the baseline at {f.achieved_rate:,.0f} events/s", "",
                            f"applied p50 {_fmt(f.p50_s, '.2f', ' s')}, p99 {_fmt(f.p99_s, '.2f', ' s')}; in a "
                            f"refreshed union p50 {_fmt(f.published_p50_s, '.2f', ' s')}, p99 "
                            f"{_fmt(f.published_p99_s, '.2f', ' s')} ({f.seen} of {f.samples} samples; caught up "
                            f"{_fmt(f.caught_up_s, '.1f', ' s')} after the last)", ""))
    if r.queries:
        q = r.queries
        for phase, queries in q.phases.items():
            when = f"{q.traffic_rate:,} events/s flowing in" if phase == "traffic" else "traffic stopped"
            for what in ("top", "channel"):
                f, b = queries.get(f"flow {what}"), queries.get(f"baseline {what}")
                if f is None or b is None:
                    continue
                out.append((f"{'top 100 of a workspace' if what == 'top' else 'channel count and rank'} at "
                            f"{q.rate:,} req/s, {when}",
                            f"p50 {_fmt(f.p50_ms, '.2f', ' ms')}, p99 {_fmt(f.p99_ms, '.2f', ' ms')} "
                            f"({f.errors} errors)",
                            f"p50 {_fmt(b.p50_ms, '.2f', ' ms')}, p99 {_fmt(b.p99_ms, '.2f', ' ms')} "
                            f"({b.errors} errors)",
                            f"p99 < {TARGET_QUERY_P99_MS:g} ms: "
                            + _met(t.get(f"flow_{what}_{phase}_met"))))
            c = queries.get("control GET")
            if c is not None:
                busy = q.cpu_cores.get(phase, {}).get("machine (every process, others' too)")
                out.append((f"control: GET of one key at {q.rate:,} req/s, {when} (the machine's busy cores: "
                            f"{_fmt(busy, '.2f')})",
                            f"p50 {_fmt(c.p50_ms, '.2f', ' ms')}, p99 {_fmt(c.p99_ms, '.2f', ' ms')}", "", ""))
    if r.memory:
        mm = r.memory
        for run in mm.runs:
            what = {"exact": "exact", "summary": f"--global-summary {mm.summary}",
                    "churn": f"exact, after {run.pairs_ever - run.active_pairs:,} other pairs came and went",
                    "baseline": "", "baseline_churn": ""}[run.name]
            if run.name.startswith("baseline"):
                out.append((f"bytes per active pair, {run.active_pairs:,} active, {run.pairs_ever:,} ever", "",
                            f"Redis {_fmt(run.redis_bytes_per_pair, ',.0f')} (its window's keys "
                            f"{_fmt(run.redis_window_bytes_per_pair, ',.0f')})", ""))
                continue
            out.append((f"bytes per active pair, {run.active_pairs:,} active, {run.pairs_ever:,} ever, {what}"
                        + (" (durable)" if run.durable else ""),
                        f"RSS {_fmt(run.rss_bytes_per_pair, ',.0f')} "
                        f"(peak {_fmt(run.peak_rss_bytes_per_pair, ',.0f')}); "
                        f"Redis {_fmt(run.redis_bytes_per_pair, ',.0f')}"
                        + (f"; recovery dir {_fmt(run.recovery_dir_bytes_per_pair, ',.0f')}" if run.durable else "")
                        + f" ({run.seconds:.0f} s)", "", ""))
        for run in mm.runs:
            if run.stages:
                out.append((f"churn{' (durable)' if run.durable else ''}, one hour at a time: per active pair "
                            f"after each hour (pairs ever: RSS / Redis / recovery dir)",
                            "; ".join(f"{st['pairs_ever'] / 1e6:g}M: {st['rss_bytes_per_pair']:,.0f} / "
                                      f"{st['redis_bytes_per_pair']:,.0f} / {st['recovery_dir_bytes_per_pair']:,.0f}"
                                      for st in run.stages), "", ""))
        if "memory_flat_met" in t:
            out.append(("memory per active pair, last hour / second hour (after the window slid once)",
                        f"RSS x{t.get('memory_churn_rss_ratio')}, Redis x{t.get('memory_churn_redis_ratio')} "
                        f"(RSS vs the first hour x{t.get('memory_churn_rss_vs_first_hour')})", "",
                        "flat (<= 1.1): " + _met(t.get("memory_flat_met"))))
    if r.error:
        for e in r.error.runs:
            out.append((f"--global-summary {e.n}: T {e.total:,}, T/N {e.bound:,.1f}",
                        f"count_high - count_low max {e.width_max:,} (mean {e.width_mean:,.1f}); true - count_low max "
                        f"{e.error_low_max:,} ({e.error_low_max_relative:.1%}); {e.exact_items} of {e.items} exact; "
                        f"exact top {e.k} listed {e.recall_top_k:.0%}", "",
                        f"within T/N: {_met(e.violations == 0)} ({e.violations} violations)"))
    if r.profile:
        for name, shares in r.profile.shares.items():
            out.append((f"profile, {name}: share of the flow's CPU samples",
                        "; ".join(f"{p} {s:.0%}" for p, s in shares.items()), "", ""))
    return out


def print_table(r: ActivityBenchResult) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"activity: the flow vs the seed's design ({r.machine.get('cpus')} CPUs)", show_lines=True)
    for column in ("what", "flow", "baseline", "target"):
        table.add_column(column, overflow="fold")
    for row in rows(r):
        table.add_row(*row)
    Console(width=170).print(table)


def chart(r: ActivityBenchResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [p for p in ("throughput", "freshness", "queries", "memory", "error") if getattr(r, p) is not None]
    cols = min(3, max(len(panels), 1))
    nrows = -(-max(len(panels), 1) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5.4 * cols, 4.6 * nrows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    for ax, part in zip(axes.flat, panels):
        if part == "throughput":
            th = r.throughput
            names = [s for s in SYSTEMS if s in th.median_events_per_s]
            labels = {"baseline": "seed\n(EXPIRE/msg)", "baseline_lean": "seed lean\n(EXPIRE/batch)", "flow": "flow",
                      "flow_durable": "flow\ndurable"}
            vals = [th.median_events_per_s[s] for s in names]
            ax.bar([labels[s] for s in names], vals, color=("#b0b0b0", "#909090", "#2b7bba", "#1b4f7a")[:len(vals)])
            for i, v in enumerate(vals):
                ax.text(i, v, f"{v:,.0f}", ha="center", va="bottom", fontsize=8)
            ax.axhline(TARGET_RATIO * th.median_events_per_s["baseline_lean"], color="red", linestyle="--",
                       linewidth=1, label=f"target {TARGET_RATIO:g}x lean")
            ax.legend(loc="upper left", fontsize=8)
            ax.set_title(f"events/s, {th.log_events:,}-message backlog\nflow/lean {th.ratio_lean:.2f}, durable "
                         f"{th.durable_ratio_lean:.2f}; mismatches {th.mismatches}", fontsize=10)
        elif part == "freshness":
            runs = r.freshness.runs
            labels = [f"{f.system}\n{f.rate // 1000}k/s" for f in runs]
            x = range(len(runs))
            ax.bar([i - 0.2 for i in x], [f.p50_s or 0 for f in runs], 0.4, label="p50", color="#7fb3e0")
            ax.bar([i + 0.2 for i in x], [f.p99_s or 0 for f in runs], 0.4, label="p99", color="#2b7bba")
            for i, f in enumerate(runs):
                if f.published_p99_s is not None:
                    ax.plot([i - 0.4, i + 0.4], [f.published_p99_s] * 2, color="black", linewidth=1)
            ax.axhline(TARGET_FRESHNESS_P99_S, color="red", linestyle="--", linewidth=1, label="p99 target")
            ax.set_xticks(list(x), labels, fontsize=8)
            ax.set_yscale("log")
            ax.set_ylabel("seconds")
            ax.legend(fontsize=8)
            ax.set_title("freshness: produced -> published\n(baseline: applied; black: in a refreshed union p99)",
                         fontsize=10)
        elif part == "queries":
            q = r.queries
            names = [(p, n) for p, qs in q.phases.items() for n in qs]
            vals = [q.phases[p][n].p99_ms or 0 for p, n in names]
            ax.bar(range(len(names)), vals, color=["#2b7bba" if n.startswith("flow") else
                                                   "#e0a030" if n.startswith("control") else "#b0b0b0"
                                                   for _, n in names])
            ax.set_xticks(range(len(names)), [f"{n}\n{p}" for p, n in names], fontsize=6, rotation=45)
            ax.axhline(TARGET_QUERY_P99_MS, color="red", linestyle="--", linewidth=1, label="p99 target")
            ax.set_yscale("log")
            ax.set_ylabel("p99 ms")
            ax.legend(fontsize=8)
            ax.set_title(f"queries at {q.rate:,} req/s (p99)", fontsize=10)
        elif part == "memory":
            mm = r.memory
            labels, vals, colors = [], [], []
            for run in mm.runs:
                tag = run.name + (" dur." if run.durable else "")
                if run.rss_bytes_per_pair is not None and not run.durable:
                    labels.append(f"{tag}\nRSS")
                    vals.append(run.rss_bytes_per_pair)
                    colors.append("#2b7bba")
                if run.redis_bytes_per_pair is not None and not run.durable:
                    labels.append(f"{tag}\nRedis")
                    vals.append(run.redis_bytes_per_pair)
                    colors.append("#b0b0b0" if run.name.startswith("baseline") else "#5fa8e0")
                if run.durable and run.recovery_dir_bytes_per_pair is not None:
                    labels.append(f"{tag}\nrec. dir")
                    vals.append(run.recovery_dir_bytes_per_pair)
                    colors.append("#1b4f7a")
            ax.bar(range(len(vals)), vals, color=colors)
            for i, v in enumerate(vals):
                ax.text(i, v, f"{v:,.0f}", ha="center", va="bottom", fontsize=6)
            ax.set_xticks(range(len(vals)), labels, fontsize=6, rotation=45)
            ax.set_title(f"bytes per active pair ({mm.pairs:,} active)", fontsize=10)
        elif part == "error":
            e = r.error.runs
            x = range(len(e))
            ax.bar([i - 0.2 for i in x], [run.width_max for run in e], 0.4, label="max count_high - count_low",
                   color="#2b7bba")
            ax.bar([i + 0.2 for i in x], [run.bound for run in e], 0.4, label="T / N", color="#b0b0b0")
            ax.set_xticks(list(x), [f"N = {run.n}" for run in e])
            ax.legend(fontsize=8)
            ax.set_title("global summary: bound width vs T/N", fontsize=10)
    fig.suptitle("rankflow activity vs the seed's design (ZINCRBY per message, ZUNIONSTORE of 60 buckets)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(cfg: ActivityBenchConfig) -> ActivityBenchResult:
    result = ActivityBench(cfg).run()
    json_path, png_path = write_outputs(result, Path(cfg.out))
    print_table(from_json(json.loads(json_path.read_text())))
    print(f"wrote {json_path} and {png_path}")
    return result


# -- the command line (``rankflow bench-activity``) ------------------------------------------
def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x)


def add_parser(sub: Any) -> None:
    d = ActivityBenchConfig()
    p = sub.add_parser("bench-activity", help="the activity flow vs the seed's design: throughput, freshness, "
                                              "queries, memory, summary error")
    p.add_argument("--events", type=int, default=d.events, help="backlog size (default: %(default)s)")
    p.add_argument("--workspaces", type=int, default=d.workspaces, help="backlog workspaces (default: %(default)s)")
    p.add_argument("--channels", type=int, default=d.channels,
                   help="channels of the biggest workspace (default: %(default)s)")
    p.add_argument("--users", type=int, default=d.users, help="users of the biggest workspace (default: %(default)s)")
    p.add_argument("--event-rate", type=float, default=d.event_rate,
                   help="backlog messages per second of event time (default: %(default)s)")
    p.add_argument("--partitions", type=int, default=d.partitions, help="topic partitions (default: %(default)s)")
    p.add_argument("--reps", type=int, default=d.reps, help="runs of each system, alternating (default: %(default)s)")
    p.add_argument("--no-durable", dest="durable", action="store_false",
                   help="throughput and profile: leave out the flow with --recovery-dir")
    p.add_argument("--compare-workspaces", type=int, default=d.compare_workspaces,
                   help="workspaces drawn at random (besides the 10 busiest) whose counts are compared "
                        "(default: %(default)s)")
    p.add_argument("--rates", type=_ints, default=d.rates, metavar="N,...",
                   help="freshness: steady events/s, each measured (default: 50000,25000)")
    p.add_argument("--steady-s", type=float, default=d.steady_s,
                   help="seconds of steady traffic (default: %(default)s)")
    p.add_argument("--queries-rate", type=int, default=d.queries_rate,
                   help="requests/s of each query (default: %(default)s)")
    p.add_argument("--queries-s", type=float, default=d.queries_s,
                   help="seconds of each query's load while traffic flows (at most 10 once it stopped); a "
                        "minute or more sees a bucket leave the window, as every minute of a live run does "
                        "(default: %(default)s)")
    p.add_argument("--queries-traffic", type=int, default=d.queries_traffic,
                   help="events/s flowing in during the first phase (default: %(default)s)")
    p.add_argument("--publish-stage", type=int, default=None,
                   help="the flow's --publish-stage (0: every snapshot in one Redis call; default: the flow's, "
                        "2000 in a live run, 0 with --until-eof)")
    p.add_argument("--memory-pairs", type=int, default=d.memory_pairs,
                   help="active (workspace, channel) pairs (default: %(default)s)")
    p.add_argument("--memory-workspaces", type=int, default=d.memory_workspaces,
                   help="their workspaces (default: %(default)s)")
    p.add_argument("--memory-churn", type=int, default=d.memory_churn,
                   help="hours before, each with as many other pairs that come and go; 0: no churn run "
                        "(default: %(default)s)")
    p.add_argument("--memory-summary", type=int, default=d.memory_summary,
                   help="the summary run's --global-summary N; 0: no summary run (default: %(default)s)")
    p.add_argument("--no-memory-durable", dest="memory_durable", action="store_false",
                   help="memory: leave out the durable runs (the recovery directory)")
    p.add_argument("--summaries", type=_ints, default=d.summaries, metavar="N,...",
                   help="error: the --global-summary values measured (default: 100,1000)")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--out", default=d.out, help="where activity.json and activity.png go (default: %(default)s)")
    p.add_argument("--parts", type=lambda t: tuple(x for x in t.split(",") if x), default=d.parts,
                   metavar="PART,...", help=f"{', '.join(PARTS)} (default: all but profile)")


def cmd(args: argparse.Namespace) -> int:
    from rankflow.options import UsageError

    unknown = [p for p in args.parts if p not in PARTS]
    if unknown:
        raise UsageError(f"--parts: unknown {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    names = {f.name for f in ActivityBenchConfig.__dataclass_fields__.values()}
    main(ActivityBenchConfig(**{k: v for k, v in vars(args).items() if k in names}))
    return 0
