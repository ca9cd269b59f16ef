"""``rankflow bench-boards``: the score-board flow against the seed's design, side by side.

All in one run, on a local Redis and Kafka-protocol broker that this command starts
and stops itself (:class:`rankflow.bench.rig.Rig`); each part can be chosen with
``--parts``:

1. **throughput**: one clean, signed score backlog (``generate_scores``) produced once
   to a topic (8 partitions by default, keyed by player); the baseline
   (``rankflow.bench.boards_baseline``: one Lua script per result, pipelined), the flow
   (``rankflow run --flow boards --until-eof``) and the flow durable (the same with a
   fresh ``--recovery-dir``: the figure that counts) each run it from start to exit as
   their own process (the flow exits after publishing the snapshot that covers the
   end), in alternating order, ``--reps`` times each. Median results/s, ratios
   against the baseline, and the CPU the broker and Redis spent beside each run.
   Exactness: every run's boards are compared with the first baseline run's, score
   per player per board (the baseline keeps no ``reached_at``); mismatches must be 0.
2. **freshness**: a producer thread sends results at a steady ``--rate`` while the
   flow follows the topic; a poller reads the published snapshot id and positions
   every 10 ms. Freshness of a sampled result = from its send to the first
   published snapshot whose positions include it (as a reader polling Redis sees it).
3. **memory**: ``--memory-players`` players with one result each on one game: every
   player on the game's 4 boards (all, best, daily, weekly). Redis ``used_memory``
   growth per board entry (flow and baseline), the flow's peak RSS above an empty
   run's per entry, and the durable run's recovery directory per entry.
4. **reads**: a board of ``--reads-players`` players, then steady traffic at
   ``--reads-traffic`` results/s while the flow publishes; ``BoardReader.top(game,
   "all", 100)`` and ``.player(game, "all", random player)`` each at ``--reads-rate``
   requests/s, open-loop (latency counted from when a request was due), p50/p99.
5. **big**: ``--big-players`` players on one board: the flow on a log with one result
   per player (``--big-mode flow``: load time, peak RSS, Redis ``used_memory``; the
   run is stopped if the machine runs low on memory, and reports how far it got),
   or the Redis side alone (``--big-mode redis``: the boards publisher writing the
   entries of one board straight from this process, in snapshots of
   ``--big-chunk`` entries).

Writes ``boards.json`` and ``boards.png`` to ``--out`` and prints a table.
"""

from __future__ import annotations

import bisect
import hashlib
import hmac
import itertools
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
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson
import redis

from rankflow.bench.boards_baseline import read_baseline_boards
from rankflow.bench.rig import Rig, _cpu_seconds, flush_redis, slowlog_by_command, slowlog_reset, used_memory
from rankflow.connectors.board_read import BoardReader, NotOnBoard, read_boards
from rankflow.connectors.kafka import KafkaEndpoint, ensure_topic, reliable_producer
from rankflow.connectors.redis_keys import Keys, boards_namespace
from rankflow.generate_scores import generate_scores
from rankflow.produce import field_key, produce_file
from rankflow.state.signatures import canonical_bytes

PARTS = ("throughput", "freshness", "memory", "reads", "big")
SYSTEMS = ("baseline", "flow", "flow_durable")
DEFAULT_KEY = "5eed" * 16  # the benchmark's signing key (hex): any key does, the flow checks every sig

TARGET_RATIO = 2.0
TARGET_FRESHNESS_P99_S = 1.0
TARGET_TOP_P99_MS = 10.0
TARGET_PLAYER_P99_MS = 5.0

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


@dataclass
class Throughput:
    runs: list[Run] = field(default_factory=list)
    median_results_per_s: dict[str, float] = field(default_factory=dict)
    ratio: float = 0.0  # flow / baseline (medians)
    durable_ratio: float = 0.0  # flow durable / baseline: the one that counts
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
class Latency:
    requests: int = 0
    errors: int = 0
    achieved_rps: float = 0.0
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None


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


@dataclass
class BoardsBenchResult:
    config: dict[str, Any]
    machine: dict[str, Any]
    throughput: Throughput | None = None
    freshness: Freshness | None = None
    memory: Memory | None = None
    reads: Reads | None = None
    big: Big | None = None  # --big-mode flow
    big_redis: Big | None = None  # --big-mode redis
    targets: dict[str, Any] = field(default_factory=dict)
    measured: dict[str, dict[str, Any]] = field(default_factory=dict)  # part -> when, wall s, its configuration


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def rss_of(pid: int | None) -> int:
    if pid is None:
        return 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def busy_cpu_seconds() -> float:
    """CPU-seconds the whole machine spent busy since boot (every process: others' too)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


# -- exactness -----------------------------------------------------------------------
def compare_boards(flow: dict[str, dict[str, list[tuple[str, int, int]]]],
                   reference: dict[str, dict[str, dict[str, int]]]) -> tuple[int, int, int, int, list[str]]:
    """Scores per player per board: (mismatches, boards compared, entries compared, boards
    the reference has that retention dropped from the flow, examples).

    A mismatch is a player whose score differs, or who is on one side only; a board
    on one side only counts its players. The baseline keeps every period until its
    TTL, the flow drops the ones docs/semantics/boards.md 7 no longer keeps: those are counted apart.
    """
    mismatches, boards, entries, dropped = 0, 0, 0, 0
    examples: list[str] = []
    for game in sorted(set(flow) | set(reference)):
        mine, theirs = flow.get(game, {}), reference.get(game, {})
        for board in sorted(set(mine) | set(theirs)):
            got = {player: score for player, score, _ in mine.get(board, [])}
            want = theirs.get(board)
            if want is None:
                mismatches += len(got)
                examples.append(f"{game}/{board}: only in the flow ({len(got)} players)")
                continue
            if board not in mine and board.startswith(("daily:", "weekly:")) and _dropped(board, mine):
                dropped += 1
                continue
            boards += 1
            entries += len(want)
            if got == want:
                continue
            for player in set(got) | set(want):
                if got.get(player) != want.get(player):
                    mismatches += 1
                    if len(examples) < 10:
                        examples.append(f"{game}/{board}/{player}: flow {got.get(player)}, baseline {want.get(player)}")
    return mismatches, boards, entries, dropped, examples


def _dropped(board: str, kept: dict[str, Any]) -> bool:
    """Whether retention (docs/semantics/boards.md 7) drops ``board`` given the periods the flow kept."""
    kind, period = board.split(":", 1)
    newest = max((b.split(":", 1)[1] for b in kept if b.startswith(kind + ":")), default=None)
    if newest is None:
        return False
    if kind == "daily":
        days = (datetime.fromisoformat(newest) - datetime.fromisoformat(period)).days
    else:
        days = (_week_start(newest) - _week_start(period)).days
    return days > 7


def _week_start(week: str) -> datetime:
    return datetime.strptime(week + "-1", "%G-W%V-%u")


# -- logs ----------------------------------------------------------------------------
def one_result_per_player(path: Path, players: int, key: bytes, seed: int, day_ms: int = MEMORY_DAY_MS) -> None:
    """A signed log where each of ``players`` players has one result on game ``arena``, all
    played within one UTC day of one ISO week: every player on exactly 4 boards."""
    rng = random.Random(seed)
    step = max(1, (DAY_MS - 2 * 3_600_000) // max(players, 1))
    digits = max(7, len(str(players - 1)))
    chunk: list[bytes] = []
    with open(path, "wb") as f:
        for i in range(players):
            player = f"p{i:0{digits}d}"
            match = f"m{i}"
            points = rng.randrange(0, 10_001, 5)
            played = day_ms + 3_600_000 + i * step
            sig = hmac.new(key, canonical_bytes(GAME, match, player, points, played), hashlib.sha256).hexdigest()
            chunk.append(orjson.dumps({"game_id": GAME, "match_id": match, "player_id": player, "points": points,
                                       "played_at": played, "received_at": played + 400, "sig": sig}))
            if len(chunk) >= 20_000:
                f.write(b"\n".join(chunk) + b"\n")
                chunk.clear()
        if chunk:
            f.write(b"\n".join(chunk) + b"\n")


def read_lines(path: Path) -> list[bytes]:
    with open(path, "rb") as f:
        return [line.rstrip(b"\n") for line in f if line.strip()]


class SteadyProducer(threading.Thread):
    """Produces ``lines`` at ``rate`` per second, keyed by player; remembers when every
    ``sample_every``-th message was sent, by its (partition, offset) once delivered."""

    def __init__(self, brokers: str, topic: str, lines: list[bytes], rate: int, sample_every: int) -> None:
        super().__init__(name="steady-producer", daemon=True)
        self.brokers, self.topic, self.lines, self.rate, self.sample_every = brokers, topic, lines, rate, sample_every
        self.sent: dict[tuple[int, int], float] = {}
        self.errors = 0
        self.seconds = 0.0
        self.stop_event = threading.Event()

    def run(self) -> None:
        producer = reliable_producer(self.brokers, **{"linger.ms": 5})
        sent = self.sent

        def sampled(at: float):
            def delivered(err: Any, msg: Any) -> None:
                if err is None:
                    sent[(msg.partition(), msg.offset())] = at
                else:
                    self.errors += 1
            return delivered

        def counted(err: Any, msg: Any) -> None:
            if err is not None:
                self.errors += 1

        start = time.perf_counter()
        rate, every = self.rate, self.sample_every
        for i, line in enumerate(self.lines):
            if self.stop_event.is_set():
                break
            ahead = start + i / rate - time.perf_counter()
            if ahead > 0.002:
                time.sleep(ahead)
                producer.poll(0)
            callback = sampled(time.time()) if i % every == 0 else counted
            while True:
                try:
                    producer.produce(self.topic, key=field_key(line, "player_id"), value=line, on_delivery=callback)
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.flush(60)
        self.seconds = time.perf_counter() - start


class SnapshotPoller(threading.Thread):
    """Reads the published snapshot id and positions every ``interval`` s, atomically (MULTI),
    and keeps when each new snapshot was first seen."""

    def __init__(self, redis_url: str, namespace: str, interval: float = 0.01) -> None:
        super().__init__(name="snapshot-poller", daemon=True)
        self.client = redis.Redis.from_url(redis_url)
        self.keys = Keys(boards_namespace(namespace))
        self.interval = interval
        self.seen: list[tuple[float, dict[str, int]]] = []  # (first seen, positions), oldest first
        self._last: bytes | None = None
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.is_set():
            self.poll()
            time.sleep(self.interval)
        self.poll()  # what was published last
        self.client.close()

    def poll(self) -> None:
        pipe = self.client.pipeline(transaction=True)
        pipe.get(self.keys.snapshot_id)
        pipe.hgetall(self.keys.positions)
        sid, positions = pipe.execute()
        if sid is not None and sid != self._last:
            self._last = sid
            self.seen.append((time.time(), {k.decode(): int(v) for k, v in positions.items()}))

    def total(self) -> int:
        return sum(self.seen[-1][1].values()) if self.seen else 0


def first_covering(snapshots: list[tuple[float, dict[str, int]]], topic: str,
                   samples: dict[tuple[int, int], float]) -> list[float]:
    """For each sample (partition, offset) -> sent at: the time until the first snapshot
    whose positions include it (positions only grow: a binary search per partition)."""
    by_part: dict[int, tuple[list[int], list[float]]] = {}
    latencies = []
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
        i = bisect.bisect_right(offsets, offset)  # first position > offset
        if i < len(offsets):
            latencies.append(times[i] - sent_at)
    return latencies


# -- the load generator ----------------------------------------------------------------
def paced_load(make_call, rate: float, seconds: float, threads: int = 8) -> Latency:
    """Open loop: request ``i`` is due at ``start + i / rate``; ``threads`` threads take them
    in turn, each with its own client (``make_call()`` gives ``(call(i), close)``). Latency
    from the due time, so a reader that falls behind is charged for the queue."""
    total = int(rate * seconds)
    counter = itertools.count()
    latencies: list[float] = []
    errors = [0]
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
                    call(i)
                except Exception:  # noqa: BLE001 - counted; the load goes on
                    errors[0] += 1
                    continue
                latencies.append(time.perf_counter() - due)
        finally:
            close()

    pool = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    took = time.perf_counter() - start
    p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
    return Latency(requests=len(latencies), errors=errors[0], achieved_rps=len(latencies) / took,
                   p50_ms=None if p50 is None else p50 * 1000, p99_ms=None if p99 is None else p99 * 1000,
                   max_ms=max(latencies, default=0.0) * 1000)


def _feed(brokers: str, topic: str, path: str, rate: int, stop_at: float) -> None:
    """A child process's steady producer (reads: keeps the bench process's GIL for the readers)."""
    lines = read_lines(Path(path))
    producer = SteadyProducer(brokers, topic, lines, rate, sample_every=10**9)
    producer.start()
    while producer.is_alive() and time.time() < stop_at:
        time.sleep(0.1)
    producer.stop_event.set()
    producer.join()


# -- the bench -----------------------------------------------------------------------
class BoardsBench:
    def __init__(self, cfg: BoardsBenchConfig) -> None:
        self.cfg = cfg
        self.key = bytes.fromhex(cfg.signing_key)
        self.rig = Rig(cfg.seed)
        self.work = self.rig.work
        self.client: redis.Redis | None = None
        self.data = Path("data")

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
        return [sys.executable, "-m", "rankflow.cli", "run", "--flow", "boards",
                "--input", f"kafka:{self.brokers}/{topic}", "--redis", self.redis_url, "--namespace", namespace,
                "--signing-key", self.cfg.signing_key,
                "--dead-letter", f"jsonl:{self.work / (namespace + '.dead.jsonl')}", *extra]

    def baseline_cmd(self, topic: str, prefix: str) -> list[str]:
        return [sys.executable, "-m", "rankflow.bench.boards_baseline", "--brokers", self.brokers, "--topic", topic,
                "--redis", self.redis_url, "--prefix", prefix]

    def command(self, system: str, topic: str, name: str) -> list[str]:
        if system == "baseline":
            return self.baseline_cmd(topic, name)
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

    def score_log(self, results: int, players: int, games: int) -> Path:
        """A clean signed log of realistic matches, kept in ``data/`` across runs."""
        path = self.data / f"boards-{results}-{players}-{games}-s{self.cfg.seed}-{self.cfg.signing_key[:8]}.jsonl"
        if not path.exists():
            self.log(f"generating {path}")
            tmp = path.with_suffix(".tmp")
            generate_scores(players, games, results, self.cfg.seed, tmp, key=self.key, clean=True)
            tmp.rename(path)
        return path

    def produce(self, path: Path, topic: str) -> float:
        self.log(f"producing {path} to {topic} ({self.cfg.partitions} partitions)")
        started = time.perf_counter()
        produce_file(str(path), KafkaEndpoint(self.brokers, topic), self.cfg.partitions, progress=False,
                     key_field="player_id")
        return time.perf_counter() - started

    # -- 1. throughput ----------------------------------------------------------------
    def throughput(self, result: BoardsBenchResult) -> None:
        cfg = self.cfg
        out = result.throughput = Throughput()
        topic = "backlog"
        self.produce(self.score_log(cfg.results, cfg.players, cfg.games), topic)
        reference: dict[str, dict[str, dict[str, int]]] | None = None
        order = 0
        for rep in range(cfg.reps):
            systems = SYSTEMS if rep % 2 == 0 else tuple(reversed(SYSTEMS))  # the baseline first, then last
            for system in systems:
                self.flush()
                name = f"{system}-{rep}"
                before_mem = self.used_memory()
                broker0, redis0 = _cpu_seconds(self.rig.broker.pid()), _cpu_seconds(self.rig.redis.pid())
                seconds, rss = self.rig.timed(self.command(system, topic, name))
                run = Run(system, order, seconds, cfg.results / seconds, rss,
                          _cpu_seconds(self.rig.broker.pid()) - broker0, _cpu_seconds(self.rig.redis.pid()) - redis0,
                          0, self.used_memory() - before_mem)
                order += 1
                if system == "baseline":
                    boards = read_baseline_boards(self.redis_url, name)
                    if reference is None:
                        reference = boards
                    flow_view = {g: {b: [(p, s, 0) for p, s in e.items()] for b, e in bs.items()}
                                 for g, bs in boards.items()}
                else:
                    assert self.client is not None
                    flow_view = read_boards(self.client, name)
                    dead = self.work / f"{name}.dead.jsonl"
                    out.dead_letters += sum(1 for _ in open(dead, "rb")) if dead.exists() else 0
                    shutil.rmtree(self.work / f"{name}.recovery", ignore_errors=True)
                assert reference is not None  # every repetition starts or ends with the baseline
                self._check(out, run, flow_view, reference)
                del flow_view
                out.runs.append(run)
                self.log(f"{system} (rep {rep + 1}): {run.results_per_s:,.0f} results/s ({seconds:.1f} s; broker "
                         f"{run.broker_cpu_s:.1f} CPU-s, Redis {run.redis_cpu_s:.1f} CPU-s; peak RSS "
                         f"{rss / 2**20:,.0f} MiB; {run.mismatches} mismatches)")
        for system in SYSTEMS:
            out.median_results_per_s[system] = statistics.median(
                r.results_per_s for r in out.runs if r.system == system)
        base = out.median_results_per_s["baseline"]
        out.ratio = out.median_results_per_s["flow"] / base
        out.durable_ratio = out.median_results_per_s["flow_durable"] / base
        self.flush()
        self.log(f"medians: {out.median_results_per_s}; flow/baseline {out.ratio:.2f}, "
                 f"durable {out.durable_ratio:.2f}; "
                 f"mismatches {out.mismatches}")

    def _check(self, out: Throughput, run: Run, view: dict, reference: dict) -> None:
        mismatches, boards, entries, dropped, examples = compare_boards(view, reference)
        run.mismatches = mismatches
        out.mismatches += mismatches
        out.boards_compared, out.entries_compared = boards, entries
        out.retention_dropped_boards = max(out.retention_dropped_boards, dropped)
        out.mismatch_examples.extend(f"{run.system}: {e}" for e in examples[: 10 - len(out.mismatch_examples)])

    # -- 2. freshness -----------------------------------------------------------------
    def freshness(self, result: BoardsBenchResult) -> None:
        cfg = self.cfg
        out = result.freshness = Freshness(rate=cfg.rate)
        total = int(cfg.rate * cfg.steady_s)
        lines = read_lines(self.score_log(total, cfg.players, cfg.games))
        topic, ns = "steady", "fresh"
        ensure_topic(self.brokers, topic, cfg.partitions)
        self.flush()
        proc = subprocess.Popen(self.flow_cmd(topic, ns), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        poller = SnapshotPoller(self.redis_url, ns)
        poller.start()
        try:
            deadline = time.monotonic() + 60
            while not poller.seen:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the flow did not start publishing: {proc.stderr.read().decode()[-2000:]}")
                time.sleep(0.05)
            self.log(f"producing {total:,} results at {cfg.rate:,}/s while the flow follows the topic")
            producer = SteadyProducer(self.brokers, topic, lines, cfg.rate, max(1, total // 5000))
            producer.start()
            producer.join()
            out.seconds, out.achieved_rate = producer.seconds, total / producer.seconds
            deadline = time.monotonic() + 120
            while poller.total() < total and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.3)
        finally:
            poller.stop_event.set()
            poller.join()
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        latencies = first_covering(poller.seen, topic, producer.sent)
        out.samples, out.seen = len(producer.sent), len(latencies)
        out.p50_s, out.p99_s = percentile(latencies, 0.5), percentile(latencies, 0.99)
        out.max_s = max(latencies, default=None)
        assert self.client is not None
        stream = Keys(boards_namespace(ns)).stream
        history = [(orjson.loads(f[b"snapshot"])) for _, f in self.client.xrange(stream)]
        published = [(s["published_at"] / 1000, s["positions"]) for s in history]
        by_published = first_covering(published, topic, producer.sent)
        out.published_p50_s, out.published_p99_s = percentile(by_published, 0.5), percentile(by_published, 0.99)
        self.flush()
        self.log(f"freshness at {out.achieved_rate:,.0f}/s: p50 {out.p50_s:.3f} s, p99 {out.p99_s:.3f} s, max "
                 f"{out.max_s:.3f} s ({out.seen} of {out.samples} samples)")

    # -- 3. memory --------------------------------------------------------------------
    def memory(self, result: BoardsBenchResult) -> None:
        cfg = self.cfg
        out = result.memory = Memory(players=cfg.memory_players)
        path = self.data / f"boards-memory-{cfg.memory_players}-s{cfg.seed}-{cfg.signing_key[:8]}.jsonl"
        if not path.exists():
            self.log(f"generating {path}")
            one_result_per_player(path.with_suffix(".tmp"), cfg.memory_players, self.key, cfg.seed)
            path.with_suffix(".tmp").rename(path)
        self.produce(path, "memory")
        empty = self.work / "empty.jsonl"
        one_result_per_player(empty, 1, self.key, cfg.seed)
        produce_file(str(empty), KafkaEndpoint(self.brokers, "empty"), cfg.partitions, progress=False,
                     key_field="player_id")
        self.flush()
        _, out.rss_empty_bytes = self.rig.timed(self.command("flow", "empty", "mem-empty"))
        for system in ("flow", "flow_durable", "baseline"):
            self.flush()
            before = self.used_memory()
            name = f"mem-{system}"
            keep = self.work / f"{name}.recovery"
            cmd = self.command(system, "memory", name)
            seconds, rss = self.rig.timed(cmd)
            grown = self.used_memory() - before
            out.load_s[system] = seconds
            if system == "baseline":
                out.redis_baseline_bytes = grown
                continue
            if system == "flow":
                out.rss_flow_bytes, out.redis_flow_bytes = rss, grown
                assert self.client is not None
                out.entries = sum(len(b) for bs in read_boards(self.client, name).values() for b in bs.values())
            else:
                out.rss_durable_bytes, out.recovery_dir_bytes = rss, dir_bytes(keep)
                shutil.rmtree(keep, ignore_errors=True)
            self.log(f"{system}: {cfg.memory_players:,} players in {seconds:.1f} s, peak RSS {rss / 2**20:,.0f} MiB, "
                     f"Redis +{grown / 2**20:,.0f} MiB")
        n = max(out.entries, 1)
        out.redis_bytes_per_entry = out.redis_flow_bytes / n
        out.baseline_redis_bytes_per_entry = out.redis_baseline_bytes / n
        out.flow_rss_bytes_per_entry = (out.rss_flow_bytes - out.rss_empty_bytes) / n
        out.flow_durable_rss_bytes_per_entry = (out.rss_durable_bytes - out.rss_empty_bytes) / n
        out.recovery_dir_bytes_per_entry = out.recovery_dir_bytes / n
        self.flush()
        self.log(f"per board entry ({out.entries:,}): Redis {out.redis_bytes_per_entry:,.0f} B (baseline "
                 f"{out.baseline_redis_bytes_per_entry:,.0f} B), flow RSS {out.flow_rss_bytes_per_entry:,.0f} B "
                 f"(durable {out.flow_durable_rss_bytes_per_entry:,.0f} B), recovery dir "
                 f"{out.recovery_dir_bytes_per_entry:,.0f} B")

    # -- 4. reads ---------------------------------------------------------------------
    def reads(self, result: BoardsBenchResult) -> None:
        import multiprocessing

        cfg = self.cfg
        out = result.reads = Reads(board_players=cfg.reads_players, traffic_rate=cfg.reads_traffic,
                                   rate=cfg.reads_rate, seconds=cfg.reads_s)
        preload = self.data / f"boards-memory-{cfg.reads_players}-s{cfg.seed}-{cfg.signing_key[:8]}.jsonl"
        if not preload.exists():
            one_result_per_player(preload.with_suffix(".tmp"), cfg.reads_players, self.key, cfg.seed)
            preload.with_suffix(".tmp").rename(preload)
        # traffic on the same game and players, played after the preload (so none is too old)
        traffic_n = int(cfg.reads_traffic * (cfg.reads_s * 4 + 60))
        traffic = self.work / "reads-traffic.jsonl"
        self._traffic_log(traffic, traffic_n, cfg.reads_players)
        topic, ns = "reads", "reads"
        self.flush()
        self.produce(preload, topic)
        proc = subprocess.Popen(self.flow_cmd(topic, ns), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        poller = SnapshotPoller(self.redis_url, ns, interval=0.1)
        poller.start()
        feeder, servers = None, {}
        try:
            deadline = time.monotonic() + 600
            while poller.total() < cfg.reads_players:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the flow did not load the board: {proc.stderr.read().decode()[-2000:]}")
                time.sleep(0.2)
            self.log(f"board of {cfg.reads_players:,} players loaded; traffic {cfg.reads_traffic:,} results/s")
            # both servers before the traffic: the memory one loads the boards (a reload is not what is measured)
            servers["redis"] = self._serve(ns, "redis")
            started = time.monotonic()
            servers["memory"] = self._serve(ns, "memory")
            out.memory_entries, out.memory_loads = self._mirror_loaded(servers["memory"], cfg.reads_players)
            out.memory_load_s = time.monotonic() - started
            self.log(f"rankflow serve --board-index memory loaded {out.memory_entries:,} entries in "
                     f"{out.memory_load_s:.1f} s")
            ctx = multiprocessing.get_context("spawn")
            feeder = ctx.Process(target=_feed, args=(self.brokers, topic, str(traffic), cfg.reads_traffic,
                                                     time.time() + 4 * cfg.reads_s + 50), daemon=True)
            feeder.start()
            time.sleep(3.0)  # the traffic reaches the flow and its snapshots
            players = [f"p{i:0{max(7, len(str(cfg.reads_players - 1)))}d}" for i in
                       random.Random(cfg.seed).sample(range(cfg.reads_players), min(10_000, cfg.reads_players))]

            def reader(query: str):
                def make():
                    client = redis.Redis.from_url(self.redis_url)
                    board = BoardReader(client, ns)

                    def call(i: int) -> None:
                        if query == "top":
                            answer = board.top(GAME, "all", 100)
                            assert len(answer["items"]) == 100
                        else:
                            try:
                                board.player(GAME, "all", players[i % len(players)])
                            except NotOnBoard:
                                raise
                    return call, client.close
                return make

            seen0 = len(poller.seen)
            pids = {"flow": proc.pid, "broker": self.rig.broker.pid(), "redis": self.rig.redis.pid(),
                    "feeder": feeder.pid, "bench (readers)": os.getpid()}
            pids["serve (redis)"], pids["serve (memory)"] = servers["redis"][0].pid, servers["memory"][0].pid
            memory = servers["memory"][0]
            for phase in ("traffic", "idle"):
                if phase == "idle":  # the same readers with the traffic stopped: what the machine gives them
                    feeder.terminate()
                    feeder.join(10)
                    del pids["feeder"]
                    memory.send_signal(signal.SIGCONT)  # it follows again (or loads again: the stream moved on)
                    time.sleep(2.0)
                    self._mirror_loaded(servers["memory"], cfg.reads_players)
                self._slowlog_reset()
                cpu0 = {name: _cpu_seconds(pid) for name, pid in pids.items() if pid is not None}
                wall0 = time.perf_counter()
                self._http_phase(out, phase, "memory", servers["memory"][1], players)
                # One server at a time: the memory one, stopped, takes no CPU from the others' measurements.
                memory.send_signal(signal.SIGSTOP)
                for query in ("top", "player"):
                    latency = paced_load(reader(query), cfg.reads_rate, cfg.reads_s)
                    setattr(out, query if phase == "traffic" else f"idle_{query}", latency)
                    self.log(f"{phase}, {query} (Redis): {latency.achieved_rps:,.0f} req/s, p50 {latency.p50_ms:.2f} "
                             f"ms, p99 {latency.p99_ms:.2f} ms, max {latency.max_ms:.1f} ms, {latency.errors} errors")
                self._http_phase(out, phase, "redis", servers["redis"][1], players)
                wall = time.perf_counter() - wall0
                out.cpu_cores[phase] = {name: round((_cpu_seconds(pid) - cpu0[name]) / wall, 3)
                                        for name, pid in pids.items() if name in cpu0}
                out.redis_slow[phase] = self._slowlog()
                self.log(f"{phase}: CPU cores used {out.cpu_cores[phase]}; Redis commands over 1 ms: "
                         f"{out.redis_slow[phase]}")
                if phase == "traffic":
                    out.snapshots_during = len(poller.seen) - seen0
            memory.send_signal(signal.SIGCONT)
            out.serve_rss_bytes = {index: rss_of(server.pid) for index, (server, _) in servers.items()}
            out.memory_loads = self._mirror_metric(servers["memory"][1], "rankflow_api_board_loads_total")
            out.memory_bytes_per_entry = (out.serve_rss_bytes["memory"] - out.serve_rss_bytes["redis"]) / \
                max(1, out.memory_entries)
            self.log(f"rankflow serve RSS: {out.serve_rss_bytes}; memory index {out.memory_bytes_per_entry:,.0f} "
                     f"bytes per entry")
        finally:
            for server, _ in servers.values():
                server.send_signal(signal.SIGCONT)
                server.send_signal(signal.SIGINT)
                try:
                    server.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    server.kill()
            if feeder is not None and feeder.is_alive():
                feeder.terminate()
                feeder.join(10)
            poller.stop_event.set()
            poller.join()
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.flush()

    def _slowlog_reset(self) -> None:
        assert self.client is not None
        slowlog_reset(self.client)

    def _slowlog(self) -> dict[str, Any]:
        """Commands that kept Redis busy over 1 ms since the reset (a script blocks every reader meanwhile)."""
        assert self.client is not None
        from rankflow.connectors.redis_scripts import BOARD_READ_LUA, PUBLISH_BOARDS_LUA

        return slowlog_by_command(self.client, {PUBLISH_BOARDS_LUA: "EVALSHA (publish)",
                                                BOARD_READ_LUA: "EVALSHA (board query)"})

    def _traffic_log(self, path: Path, n: int, players: int) -> None:
        rng = random.Random(self.cfg.seed + 7)
        start = MEMORY_DAY_MS + DAY_MS - 3_600_000  # after the preload, the same day
        digits = max(7, len(str(players - 1)))
        with open(path, "wb") as f:
            for i in range(n):
                player, match = f"p{rng.randrange(players):0{digits}d}", f"t{i}"
                points, played = rng.randrange(0, 1001, 5), start + i
                sig = hmac.new(self.key, canonical_bytes(GAME, match, player, points, played),
                               hashlib.sha256).hexdigest()
                f.write(orjson.dumps({"game_id": GAME, "match_id": match, "player_id": player, "points": points,
                                      "played_at": played, "received_at": played + 300, "sig": sig}) + b"\n")

    def _http_phase(self, out: Reads, phase: str, index: str, port: int, players: list[str]) -> None:
        """``top`` then ``player`` over HTTP on the server of ``--board-index index``."""
        for query in ("top", "player"):
            latency = self._http_load(port, query, players)
            (out.http if index == "redis" else out.http_memory).setdefault(phase, {})[query] = asdict(latency)
            self.log(f"{phase}, {query} (HTTP, --board-index {index}): {latency.achieved_rps:,.0f} req/s, p50 "
                     f"{latency.p50_ms:.2f} ms, p99 {latency.p99_ms:.2f} ms, max {latency.max_ms:.1f} ms, "
                     f"{latency.errors} errors")

    def _mirror_loaded(self, served: tuple[subprocess.Popen, int], players: int) -> tuple[int, int]:
        """Wait until ``rankflow serve --board-index memory`` serves from memory (its
        ``/metrics`` count the entries it holds); the number of entries and of loads."""
        server, port = served
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and server.poll() is None:
            entries = self._mirror_metric(port, "rankflow_api_board_entries")
            if entries >= players:
                return entries, self._mirror_metric(port, "rankflow_api_board_loads_total")
            time.sleep(0.5)
        raise RuntimeError("rankflow serve --board-index memory did not load the boards")

    @staticmethod
    def _mirror_metric(port: int, name: str) -> int:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return int(float(line.split()[1]))
        return 0

    def _serve(self, namespace: str, board_index: str = "redis") -> tuple[subprocess.Popen, int]:
        """``rankflow serve --board-index INDEX`` on the namespace, once it answers ``GET /boards/...``."""
        import urllib.request

        from rankflow.services import free_port
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "rankflow.cli", "serve", "--port", str(port),
                                   "--redis", self.redis_url, "--namespace", namespace,
                                   "--board-index", board_index],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/boards/{GAME}/all/top?n=1", timeout=2) as r:
                    if r.status == 200:
                        return server, port
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                raise RuntimeError(f"rankflow serve did not answer: {server.stderr.read().decode()[-2000:]}")
            time.sleep(0.2)

    def _http_load(self, port: int, query: str, players: list[str]) -> Latency:
        """``GET /boards/arena/all/top?n=100`` or ``.../players/{id}`` open-loop (``api_load``)."""
        import asyncio

        from rankflow.bench.api_load import run_load

        cfg = self.cfg
        if query == "top":
            def path(i: int) -> str:
                return f"/boards/{GAME}/all/top?n=100"
        else:
            def path(i: int) -> str:
                return f"/boards/{GAME}/all/players/{players[i % len(players)]}"
        load = asyncio.run(run_load("127.0.0.1", port, path, cfg.reads_rate, cfg.reads_s))
        errors = load.errors + sum(n for status, n in load.statuses.items() if status != 200)
        summary = load.summary()
        return Latency(requests=load.requests, errors=errors, achieved_rps=summary["rps"], p50_ms=summary["p50_ms"],
                       p99_ms=summary["p99_ms"], max_ms=summary["max_ms"])

    # -- 5. big -----------------------------------------------------------------------
    def big(self, result: BoardsBenchResult) -> None:
        cfg = self.cfg
        for mode in (("flow", "redis") if cfg.big_mode == "both" else (cfg.big_mode,)):
            out = Big(mode=mode, players=cfg.big_players)
            started = time.perf_counter()
            self.flush()
            if mode == "redis":
                result.big_redis = out
                self._big_redis(out)
            else:
                result.big = out
                self._big_flow(out)
            out.redis_bytes_per_entry = out.redis_used_memory_bytes / max(out.entries, 1)
            out.wall_s = time.perf_counter() - started
            self.flush()

    def _big_flow(self, out: Big) -> None:
        cfg = self.cfg
        path = self.work / "big.jsonl"
        started = time.perf_counter()
        self.log(f"generating {cfg.big_players:,} players, one result each")
        one_result_per_player(path, cfg.big_players, self.key, cfg.seed)
        out.generate_s = time.perf_counter() - started
        out.produce_s = self.produce(path, "big")
        path.unlink()
        out.broker_rss_bytes = rss_of(self.rig.broker.pid())
        base = self.used_memory()
        ns = "big"
        poller = SnapshotPoller(self.redis_url, ns, interval=0.5)
        poller.start()
        started = time.perf_counter()
        proc = subprocess.Popen(self.flow_cmd("big", ns, "--until-eof"), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        peak, low = 0, mem_available()
        status = None
        while status is None:
            try:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid == 0:
                    status = None
            except ChildProcessError:
                break
            if status is not None:
                peak = max(peak, usage.ru_maxrss * 1024)
                proc.returncode = os.waitstatus_to_exitcode(status)
                break
            peak = max(peak, rss_of(proc.pid))
            low = min(low, mem_available())
            if low < cfg.big_min_free_gib * 2**30:
                out.stopped_because = (f"the machine had {low / 2**30:.1f} GiB available (flow RSS {peak / 2**30:.1f} "
                                       f"GiB, Redis {(self.used_memory() - base) / 2**30:.1f} GiB, broker "
                                       f"{rss_of(self.rig.broker.pid()) / 2**30:.1f} GiB): stopped")
                self.log(out.stopped_because)
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=300)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                break
            time.sleep(0.5)
        seconds = time.perf_counter() - started
        poller.stop_event.set()
        poller.join()
        out.process_peak_rss_bytes = peak
        out.min_available_bytes = low
        out.loaded_players = poller.total()
        out.complete = out.loaded_players >= cfg.big_players and proc.returncode == 0
        out.load_s = seconds
        out.results_per_s = out.loaded_players / seconds
        out.redis_used_memory_bytes = self.used_memory() - base
        out.entries = self._count_entries(ns)
        if proc.returncode not in (0, 130) and out.stopped_because is None:
            out.stopped_because = f"the flow exited with {proc.returncode}: {proc.stderr.read().decode()[-1500:]}"
        self.log(f"big (flow): {out.loaded_players:,} of {cfg.big_players:,} players in {seconds:.0f} s; "
                 f"{out.entries:,} entries; Redis {out.redis_used_memory_bytes / 2**30:.2f} GiB; flow peak RSS "
                 f"{peak / 2**30:.2f} GiB; lowest available {low / 2**30:.1f} GiB")

    def _count_entries(self, namespace: str) -> int:
        assert self.client is not None
        keys = Keys(boards_namespace(namespace))
        total = 0
        for name in self.client.smembers(keys.boards):
            game, board = orjson.loads(name)
            total += int(self.client.zcard(keys.board(game, board)[0]))
        return total

    def _big_redis(self, out: Big) -> None:
        """The boards publisher alone: one board of ``big_players`` entries, in snapshots."""
        from rankflow.connectors.redis_boards import BoardsState
        from rankflow.connectors.redis_generations import join_run
        from rankflow.connectors.redis_publish import Publisher
        from rankflow.state.board_snapshot import BoardsSnapshot
        from rankflow.state.snapshot import SNAPSHOT_ID_RUN_FACTOR

        cfg = self.cfg
        assert self.client is not None
        ns = boards_namespace("bigr")
        token, generation = join_run(self.client, ns, "bench-big", fresh=True)
        publisher = Publisher(self.redis_url, ns, token, generation, live=True, state=BoardsState())
        rng = random.Random(cfg.seed)
        base, low = self.used_memory(), mem_available()
        rss0 = rss_of(os.getpid())
        started = time.perf_counter()
        digits = max(7, len(str(cfg.big_players - 1)))
        done = 0
        for epoch, first in enumerate(range(0, cfg.big_players, cfg.big_chunk), start=1):
            n = min(cfg.big_chunk, cfg.big_players - first)
            entries = {(GAME, "all"): {f"p{i:0{digits}d}": (rng.randrange(0, 1_000_001, 5), MEMORY_DAY_MS + i)
                                       for i in range(first, first + n)}}
            snap = BoardsSnapshot(snapshot_id=token * SNAPSHOT_ID_RUN_FACTOR + epoch, run=token, epoch=epoch,
                                  positions={"big/0": first + n}, dead_letters=0, k_max=100, boards={}, entries=entries,
                                  dropped=[], aliases={}, partition_lag_ms={}, errors=[])
            publisher.publish(snap)
            done = first + n
            low = min(low, mem_available())
            if low < cfg.big_min_free_gib * 2**30:
                out.stopped_because = f"the machine had {low / 2**30:.1f} GiB available: stopped"
                break
            if epoch % 20 == 0:
                self.log(f"big (redis): {done:,} entries, {time.perf_counter() - started:.0f} s, Redis "
                         f"{(self.used_memory() - base) / 2**30:.2f} GiB")
        out.load_s = time.perf_counter() - started
        out.loaded_players = out.entries = done
        out.complete = done >= cfg.big_players
        out.results_per_s = done / out.load_s
        out.redis_used_memory_bytes = self.used_memory() - base
        out.process_peak_rss_bytes = rss_of(os.getpid()) - rss0  # what the publisher kept (this process's growth)
        out.min_available_bytes = low
        publisher.close()
        self.log(f"big (redis): {done:,} entries in {out.load_s:.0f} s ({out.results_per_s:,.0f}/s); Redis "
                 f"{out.redis_used_memory_bytes / 2**30:.2f} GiB ({out.redis_used_memory_bytes / max(done, 1):.0f} "
                 f"B/entry); this process grew {out.process_peak_rss_bytes / 2**30:.2f} GiB")

    # -- all --------------------------------------------------------------------------
    def run(self) -> BoardsBenchResult:
        cfg = self.cfg
        unknown = set(cfg.parts) - set(PARTS)
        if unknown:
            raise ValueError(f"unknown parts {sorted(unknown)}: choose from {', '.join(PARTS)}")
        result = BoardsBenchResult(config=asdict(cfg), machine={
            "cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
            "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")})
        self.data.mkdir(exist_ok=True)
        try:
            with self.rig:
                self.client = self.rig.client
                for part in PARTS:
                    if part in cfg.parts:
                        started = time.perf_counter()
                        load_before, busy_before = os.getloadavg(), busy_cpu_seconds()
                        getattr(self, part)(result)
                        wall = time.perf_counter() - started
                        names = ("big", "big_redis") if part == "big" else (part,)
                        for name in names:
                            if getattr(result, name) is None:
                                continue
                            if part != "big":
                                getattr(result, name).wall_s = wall
                            result.measured[name] = {"at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                                     "wall_s": round(getattr(result, name).wall_s, 1),
                                                     "loadavg_before_after": [load_before, os.getloadavg()],
                                                     "machine_busy_cores": round((busy_cpu_seconds() - busy_before)
                                                                                 / wall, 2),
                                                     "config": asdict(cfg)}
                        self.log(f"{part}: {wall:.0f} s wall")
        finally:
            shutil.rmtree(self.work, ignore_errors=True)
        result.targets = targets(result)
        return result


def targets(r: BoardsBenchResult) -> dict[str, Any]:
    t: dict[str, Any] = {}
    if r.throughput:
        t["throughput_ratio_min"] = TARGET_RATIO
        t["durable_ratio_met"] = r.throughput.durable_ratio >= TARGET_RATIO
        t["ratio_met"] = r.throughput.ratio >= TARGET_RATIO
        t["exact"] = r.throughput.mismatches == 0 and r.throughput.dead_letters == 0
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
    if r.big_redis:
        t["big_redis_fits"] = r.big_redis.complete
    return t


# -- output ----------------------------------------------------------------------------
def from_json(data: dict[str, Any]) -> BoardsBenchResult:
    """A result written by :func:`write_outputs`, back as dataclasses."""
    def part(cls: Any, d: dict[str, Any] | None) -> Any:
        if d is None:
            return None
        d = dict(d)
        if cls is Throughput:
            d["runs"] = [Run(**x) for x in d.get("runs", [])]
        if cls is Reads:
            for name in ("top", "player", "idle_top", "idle_player"):
                d[name] = Latency(**d.get(name, {}))
        return cls(**d)

    return BoardsBenchResult(config=data.get("config", {}), machine=data.get("machine", {}),
                             throughput=part(Throughput, data.get("throughput")),
                             freshness=part(Freshness, data.get("freshness")), memory=part(Memory, data.get("memory")),
                             reads=part(Reads, data.get("reads")), big=part(Big, data.get("big")),
                             big_redis=part(Big, data.get("big_redis")),
                             targets=data.get("targets", {}), measured=data.get("measured", {}))


def merge_previous(result: BoardsBenchResult, json_path: Path) -> BoardsBenchResult:
    """Parts this run did not measure are kept from the previous ``boards.json`` (each part
    says when and with which configuration it was measured), so the parts of a 2-core
    machine's long benchmark can be run one at a time into one report."""
    if not json_path.exists():
        return result
    try:
        previous = from_json(json.loads(json_path.read_text()))
    except (ValueError, TypeError, KeyError):
        return result
    for name in (*PARTS, "big_redis"):
        if getattr(result, name) is None and getattr(previous, name) is not None:
            setattr(result, name, getattr(previous, name))
            if name in previous.measured:
                result.measured[name] = previous.measured[name]
    result.targets = targets(result)
    return result


def write_outputs(result: BoardsBenchResult, out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    json_path, png_path = out / "boards.json", out / "boards.png"
    result = merge_previous(result, json_path)
    json_path.write_text(json.dumps(asdict(result), indent=2) + "\n")
    chart(result, png_path)
    return json_path, png_path


def _fmt(value: float | None, spec: str, unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def rows(r: BoardsBenchResult) -> list[tuple[str, str, str, str]]:
    """(what, flow, baseline, target) rows of the summary table."""
    out: list[tuple[str, str, str, str]] = []
    t = r.targets
    if r.throughput:
        th, m = r.throughput, r.throughput.median_results_per_s
        runs = lambda s: " / ".join(f"{x.results_per_s:,.0f}" for x in th.runs if x.system == s)  # noqa: E731
        out.append(("results/s on the backlog (median; each run)",
                    f"{m['flow']:,.0f} ({runs('flow')}); durable {m['flow_durable']:,.0f} ({runs('flow_durable')})",
                    f"{m['baseline']:,.0f} ({runs('baseline')})",
                    f"flow/baseline {th.ratio:.2f}, durable {th.durable_ratio:.2f} (>= {TARGET_RATIO}): "
                    f"{'met' if t.get('durable_ratio_met') else 'MISSED'}"))
        out.append(("exactness: scores per player per board vs the baseline",
                    f"{th.mismatches} mismatches over {len(th.runs)} runs ({th.boards_compared} boards, "
                    f"{th.entries_compared:,} entries each); {th.dead_letters} dead letters", "reference",
                    "0: " + ("met" if t.get("exact") else "MISSED")))
    if r.freshness:
        f = r.freshness
        out.append((f"freshness at {f.achieved_rate:,.0f} results/s (produced -> visible in Redis)",
                    f"p50 {_fmt(f.p50_s, '.3f', ' s')}, p99 {_fmt(f.p99_s, '.3f', ' s')} ({f.seen} samples)", "",
                    f"p99 < {TARGET_FRESHNESS_P99_S:g} s: {'met' if t.get('freshness_met') else 'MISSED'}"))
    if r.memory:
        mm = r.memory
        out.append((f"bytes per board entry, {mm.players:,} players x 4 boards ({mm.entries:,} entries)",
                    f"Redis {_fmt(mm.redis_bytes_per_entry, ',.0f')}; "
                    f"flow RSS {_fmt(mm.flow_rss_bytes_per_entry, ',.0f')}"
                    f" (durable {_fmt(mm.flow_durable_rss_bytes_per_entry, ',.0f')}); recovery dir "
                    f"{_fmt(mm.recovery_dir_bytes_per_entry, ',.0f')} on disk",
                    f"Redis {_fmt(mm.baseline_redis_bytes_per_entry, ',.0f')}", ""))
    if r.reads:
        rd = r.reads
        for name, lat, target, key in (("top n=100", rd.top, TARGET_TOP_P99_MS, "top_met"),
                                       ("player rank", rd.player, TARGET_PLAYER_P99_MS, "player_met")):
            out.append((f"{name} at {rd.rate:,} req/s, {rd.board_players:,}-player board, flow publishing "
                        f"{rd.traffic_rate:,} results/s",
                        f"p50 {_fmt(lat.p50_ms, '.2f', ' ms')}, p99 {_fmt(lat.p99_ms, '.2f', ' ms')} "
                        f"({lat.achieved_rps:,.0f} req/s, {lat.errors} errors)",
                        "", f"p99 < {target:g} ms: {'met' if t.get(key) else 'MISSED'}"))
        for index, http in (("redis", rd.http), ("memory", rd.http_memory)):
            for phase, queries in http.items():
                for query, lat in queries.items():
                    name = "GET /boards/G/all/top?n=100" if query == "top" else "GET /boards/G/all/players/{id}"
                    when = (f"flow publishing {rd.traffic_rate:,} results/s" if phase == "traffic"
                            else "traffic stopped")
                    target = TARGET_TOP_P99_MS if query == "top" else TARGET_PLAYER_P99_MS
                    p99 = lat.get("p99_ms")
                    met = p99 is not None and p99 < target and not lat.get("errors")
                    out.append((f"{name} (rankflow serve --board-index {index}) at {rd.rate:,} req/s, {when}",
                                f"p50 {_fmt(lat.get('p50_ms'), '.2f', ' ms')}, p99 {_fmt(p99, '.2f', ' ms')} "
                                f"({lat.get('errors', 0)} errors)", "",
                                f"p99 < {target:g} ms: {'met' if met else 'MISSED'}" if phase == "traffic" else ""))
        if rd.memory_entries:
            out.append((f"rankflow serve --board-index memory: {rd.memory_entries:,} entries in memory",
                        f"{_fmt(rd.memory_bytes_per_entry, ',.0f')} bytes per entry (RSS over --board-index redis's:"
                        f" {rd.serve_rss_bytes.get('memory', 0) / 2**20:,.0f} vs "
                        f"{rd.serve_rss_bytes.get('redis', 0) / 2**20:,.0f} MiB); loaded in "
                        f"{_fmt(rd.memory_load_s, '.1f', ' s')}, {rd.memory_loads} load(s) in all", "", ""))
        for name, lat in (("top n=100", rd.idle_top), ("player rank", rd.idle_player)):
            if lat.requests:
                out.append((f"{name} at {rd.rate:,} req/s, the same board, traffic stopped (the flow idle)",
                            f"p50 {_fmt(lat.p50_ms, '.2f', ' ms')}, p99 {_fmt(lat.p99_ms, '.2f', ' ms')}", "", ""))
    for b in (r.big, r.big_redis):
        if b is None:
            continue
        what = "the flow on one result per player (4 boards each)" if b.mode == "flow" else \
            "the boards publisher alone, one board"
        out.append((f"{b.players:,} players on one board: {what}",
                    f"{b.loaded_players:,} players loaded in {_fmt(b.load_s, ',.0f', ' s')} "
                    f"({_fmt(b.results_per_s, ',.0f', '/s')}); Redis {b.redis_used_memory_bytes / 2**30:.2f} GiB "
                    f"({b.entries:,} entries, {_fmt(b.redis_bytes_per_entry, ',.0f')} B each); "
                    f"{'flow' if b.mode == 'flow' else 'publisher'} RSS {b.process_peak_rss_bytes / 2**30:.2f} GiB"
                    + (f"; {b.stopped_because}" if b.stopped_because else ""),
                    "", "fits: " + ("yes" if b.complete else "NO")))
    return out


def print_table(r: BoardsBenchResult) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"score boards: flow vs the seed's design ({r.machine['cpus']} CPUs)", show_lines=True)
    for column in ("what", "flow", "baseline", "target"):
        table.add_column(column, overflow="fold")
    for row in rows(r):
        table.add_row(*row)
    Console(width=160).print(table)


def chart(r: BoardsBenchResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [p for p in ("throughput", "freshness", "memory", "reads", "big", "big_redis")
              if getattr(r, p) is not None]
    cols = min(3, max(len(panels), 1))
    nrows = -(-max(len(panels), 1) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5.2 * cols, 4.6 * nrows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    for ax, part in zip(axes.flat, panels):
        if part == "throughput":
            th = r.throughput
            names = ["baseline", "flow", "flow_durable"]
            vals = [th.median_results_per_s[s] for s in names]
            ax.bar(["baseline\n(Lua/result)", "flow", "flow\ndurable"], vals, color=("#b0b0b0", "#2b7bba", "#1b4f7a"))
            for i, v in enumerate(vals):
                ax.text(i, v, f"{v:,.0f}", ha="center", va="bottom")
            ax.axhline(TARGET_RATIO * th.median_results_per_s["baseline"], color="red", linestyle="--", linewidth=1,
                       label=f"target {TARGET_RATIO:g}x baseline")
            ax.legend(loc="upper left", fontsize=8)
            ax.set_title(f"results/s, {r.config['results']:,}-result backlog\nflow/baseline {th.ratio:.2f}, "
                         f"durable {th.durable_ratio:.2f}; mismatches {th.mismatches}", fontsize=10)
        elif part == "freshness":
            f = r.freshness
            ax.bar(["p50", "p99"], [f.p50_s or 0, f.p99_s or 0], color=("#7fb3e0", "#2b7bba"))
            ax.axhline(TARGET_FRESHNESS_P99_S, color="red", linestyle="--", linewidth=1, label="p99 target")
            ax.legend(fontsize=8)
            ax.set_ylabel("seconds")
            ax.set_title(f"freshness at {f.achieved_rate:,.0f} results/s\n(produced -> visible)", fontsize=10)
        elif part == "memory":
            mm = r.memory
            labels = ["Redis\n(flow)", "Redis\n(baseline)", "flow\nRSS", "durable\nRSS", "recovery\ndir"]
            vals = [mm.redis_bytes_per_entry, mm.baseline_redis_bytes_per_entry, mm.flow_rss_bytes_per_entry,
                    mm.flow_durable_rss_bytes_per_entry, mm.recovery_dir_bytes_per_entry]
            vals = [v or 0 for v in vals]
            ax.bar(labels, vals, color=("#2b7bba", "#b0b0b0", "#5fa8e0", "#1b4f7a", "#909090"))
            for i, v in enumerate(vals):
                ax.text(i, v, f"{v:,.0f}", ha="center", va="bottom", fontsize=8)
            ax.set_title(f"bytes per board entry\n({mm.players:,} players x 4 boards)", fontsize=10)
        elif part == "reads":
            rd = r.reads
            x = [0, 1]
            ax.bar([i - 0.2 for i in x], [rd.top.p50_ms or 0, rd.player.p50_ms or 0], 0.4, label="p50",
                   color="#7fb3e0")
            ax.bar([i + 0.2 for i in x], [rd.top.p99_ms or 0, rd.player.p99_ms or 0], 0.4, label="p99",
                   color="#2b7bba")
            ax.plot([-0.4, 0.4], [TARGET_TOP_P99_MS] * 2, color="red", linestyle="--", linewidth=1, label="p99 target")
            ax.plot([0.6, 1.4], [TARGET_PLAYER_P99_MS] * 2, color="red", linestyle="--", linewidth=1)
            ax.set_xticks(x, ["top n=100", "player rank"])
            ax.set_ylabel("ms")
            ax.legend(fontsize=8)
            ax.set_title(f"reads from Redis (BoardReader) at {rd.rate:,} req/s\n"
                         f"while the flow publishes {rd.traffic_rate:,} results/s",
                         fontsize=10)
        elif part in ("big", "big_redis"):
            b = getattr(r, part)
            vals = [b.redis_used_memory_bytes / 2**30, b.process_peak_rss_bytes / 2**30]
            ax.bar(["Redis", "flow RSS" if b.mode == "flow" else "publisher"], vals, color=("#2b7bba", "#5fa8e0"))
            for i, v in enumerate(vals):
                ax.text(i, v, f"{v:.2f} GiB", ha="center", va="bottom")
            ax.set_title(f"{b.loaded_players:,} of {b.players:,} players ({b.mode})\n"
                         f"load {_fmt(b.load_s, '.0f', ' s')}", fontsize=10)
    fig.suptitle("rankflow score boards vs the seed's design (one Lua script per result)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(cfg: BoardsBenchConfig) -> BoardsBenchResult:
    result = BoardsBench(cfg).run()
    json_path, png_path = write_outputs(result, Path(cfg.out))
    print_table(from_json(json.loads(json_path.read_text())))
    print(f"wrote {json_path} and {png_path}")
    return result
