"""What every benchmark shares, written once: services, processes, measures, results.

A :class:`Rig` starts its own Redis and Kafka-protocol broker (Tansu) on free ports in
a private folder, produces logs to topics, and builds the command of a flow on them.
Around it, one implementation of each measure the benchmarks take:

* processes: :func:`start` (standard error to a file, read back when it fails),
  :func:`stop` (SIGINT, then kill), :func:`wait_until`, and :func:`timed`, which runs a
  command to its end and takes its wall seconds, its own CPU seconds and its peak
  memory: the process's own ``VmHWM`` from ``/proc``, never ``ru_maxrss`` (on Linux a
  forked child's ``ru_maxrss`` also holds the RSS of the parent it was forked from,
  before the ``exec``);
* CPU: :func:`cpu_seconds` of one process (a flow, Redis, the broker) and
  :class:`CpuMeter`, the cores a set of processes used over a phase;
* Redis: its slow log by command and script, its memory, emptying it;
* figures: :func:`percentile`, :func:`first_covering` (freshness from positions),
  :class:`PositionsPoller`, :func:`paced_load` (open-loop reads) and
  :func:`produce_paced` (steady traffic);
* profiles: :func:`py_spy` and :func:`profile_shares`;
* results: :func:`write_results` (``NAME.json`` and ``NAME.png``, keeping the parts a
  run did not measure from the previous file), :func:`load_result`, :func:`chart`
  (matplotlib, imported only when a chart is drawn) and :func:`print_table`.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import types
import typing
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, is_dataclass
from datetime import datetime, UTC
from pathlib import Path
from typing import Any, Self, TypeVar, cast

import orjson
import redis

from rankflow.connectors.kafka import KafkaEndpoint, reliable_producer
from rankflow.connectors.redis_replies import Hash
from rankflow.produce import field_key, produce_file
from rankflow.services import LocalRedis, LocalTansu, free_port

POLL_S = 0.1
"""How often a running process's ``VmHWM`` is read."""


# -- processes ---------------------------------------------------------------------------
def cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds ``pid`` has spent so far (0 for no process)."""
    return 0.0 if pid is None else sum(cpu_times(pid))


def cpu_times(pid: int) -> tuple[float, float]:
    """User and system CPU seconds ``pid`` has spent so far."""
    fields_ = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields_[11]) / tick, int(fields_[12]) / tick


def proc_status(pid: int | None, field: str) -> int:
    """A ``/proc/PID/status`` size field (``VmRSS``, ``VmHWM``) in bytes; 0 once the process is gone."""
    if pid is None:
        return 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def mem_available() -> int:
    """The machine's ``MemAvailable`` in bytes."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def busy_cpu_seconds() -> float:
    """CPU-seconds the whole machine spent busy since boot (every process: others' too)."""
    fields_ = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields_[3] + (fields_[4] if len(fields_) > 4 else 0)
    return (sum(fields_[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def dir_bytes(path: Path) -> int:
    """The bytes of the files below ``path`` (0 if it does not exist)."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def start(cmd: list[str], stderr_path: Path) -> subprocess.Popen:
    """Start ``cmd`` with its standard error in ``stderr_path``: a file, never a pipe nobody
    reads (a flow that logs a pipe full would block)."""
    with open(stderr_path, "wb") as err:
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)


def failure(cmd: list[str], stderr_path: Path, what: str = "failed") -> str:
    """``cmd`` ``what``, with the end of its standard error."""
    return f"{' '.join(cmd[:6])} {what}: {stderr_path.read_text(errors='replace')[-2000:]}"


def stop(proc: subprocess.Popen, timeout: float = 60.0) -> None:
    """SIGINT (a flow's last barrier, its recovery state written), then kill after ``timeout``."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_until(done: Callable[[], bool], timeout: float, proc: subprocess.Popen | None = None,
               what: str | None = None, interval: float = 0.05, stderr_path: Path | None = None) -> bool:
    """Wait until ``done()``: True. If ``proc`` exits or ``timeout`` seconds pass first: False,
    or with ``what``, fail with it (and the end of ``stderr_path``)."""
    deadline = time.monotonic() + timeout
    while not done():
        if (proc is not None and proc.poll() is not None) or time.monotonic() > deadline:
            if what is None:
                return False
            tail = stderr_path.read_text(errors="replace")[-2000:] if stderr_path is not None else ""
            raise RuntimeError(f"{what}: {tail}" if tail else what)
        time.sleep(interval)
    return True


@dataclass
class Timed:
    """One command run to its end."""

    seconds: float  # wall, start-up included (as an operator sees it)
    peak_rss_bytes: int  # the process's own VmHWM
    cpu_s: float  # its own user + system CPU seconds (with the children it waited for)


def timed(cmd: list[str], stderr_path: Path) -> Timed:
    """Run ``cmd`` to completion. The peak is the process's own ``VmHWM``, read every
    :data:`POLL_S`: not ``ru_maxrss``, which on Linux also holds the RSS of the process
    that forked it (this one, with its logs in memory) from before the ``exec``."""
    started = time.perf_counter()
    proc = start(cmd, stderr_path)
    peak = 0
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        peak = max(peak, proc_status(proc.pid, "VmHWM"))
        time.sleep(POLL_S)
    seconds = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(failure(cmd, stderr_path))
    return Timed(seconds, peak, usage.ru_utime + usage.ru_stime)


class CpuMeter:
    """The CPU cores each of a set of processes used since the meter was made (CPU-s per s)."""

    MACHINE = "machine (every process, others' too)"

    def __init__(self, pids: dict[str, int | None], machine: bool = False) -> None:
        self.pids = {name: pid for name, pid in pids.items() if pid is not None}
        self.before = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        self.machine = busy_cpu_seconds() if machine else None
        self.started = time.perf_counter()
        self.wall = 0.0

    def cores(self) -> dict[str, float]:
        """The cores used since the meter was made; ``wall``: the seconds that covers."""
        wall = self.wall = time.perf_counter() - self.started
        out = {name: round((cpu_seconds(pid) - self.before[name]) / wall, 3) for name, pid in self.pids.items()}
        if self.machine is not None:
            out[self.MACHINE] = round((busy_cpu_seconds() - self.machine) / wall, 3)
        return out


# -- Redis -------------------------------------------------------------------------------
def slowlog_reset(client: Any) -> None:
    """Make Redis log every command that keeps it busy over 1 ms, from now on."""
    client.config_set("slowlog-log-slower-than", 1000)
    client.config_set("slowlog-max-len", 100_000)
    client.slowlog_reset()


def slowlog_by_command(client: Any, scripts: dict[str, str]) -> dict[str, Any]:
    """Commands that kept Redis busy over 1 ms since :func:`slowlog_reset`, by command, and
    by script for ``EVALSHA`` (``scripts``: Lua source -> name): a script blocks every
    reader while it runs, which is what a read's p99 under publishing shows."""
    names = {hashlib.sha1(source.encode()).hexdigest(): name for source, name in scripts.items()}
    by: dict[str, list[int]] = {}
    for e in client.slowlog_get(100_000):
        command = e["command"]
        words = (command.decode(errors="replace") if isinstance(command, bytes) else str(command)).split(" ")
        name = words[0].upper()
        if name == "EVALSHA" and len(words) > 1:
            name = names.get(words[1], "EVALSHA (other)")
        by.setdefault(name, []).append(int(e["duration"]))
    return {name: {"count": len(d), "max_ms": max(d) / 1000, "total_ms": sum(d) / 1000} for name, d in by.items()}


def flush_redis(client: Any) -> None:
    """Empty Redis, and wait until its memory is freed (a big board or window takes seconds)."""
    client.flushall(asynchronous=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        info = client.info("memory")
        if int(info.get("lazyfree_pending_objects", 0)) == 0 and client.dbsize() == 0:
            break
        time.sleep(0.2)
    time.sleep(0.2)


def used_memory(client: Any) -> int:
    return int(client.info("memory")["used_memory"])


def redis_cpu(client: Any) -> float:
    """Redis's user + system CPU seconds so far (``INFO cpu``)."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


# -- figures -----------------------------------------------------------------------------
def percentile(values: Iterable[float], q: float) -> float | None:
    """The ``q`` quantile (nearest rank) of ``values``; None for none."""
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def fmt(value: float | None, spec: str, unit: str = "") -> str:
    """A figure for a table or a log line: ``-`` for one not measured."""
    return "-" if value is None else f"{value:{spec}}{unit}"


Seen = list[tuple[float, dict[str, int]]]
"""(first seen, positions: ``topic/partition`` -> next offset), oldest first."""


def first_covering(seen: Seen, topic: str, samples: dict[tuple[int, int], float]) -> dict[tuple[int, int], float]:
    """For each sample (partition, offset) -> sent at: the time until the first state whose
    positions include it (positions only grow: a binary search per partition)."""
    by_part: dict[int, tuple[list[int], list[float]]] = {}
    out: dict[tuple[int, int], float] = {}
    for (part, offset), sent_at in samples.items():
        if part not in by_part:
            name = f"{topic}/{part}"
            offsets, times, high = [], [], -1
            for at, positions in seen:
                value = positions.get(name, 0)
                if value > high:
                    high = value
                    offsets.append(value)
                    times.append(at)
            by_part[part] = (offsets, times)
        offsets, times = by_part[part]
        i = bisect.bisect_right(offsets, offset)  # first position > offset
        if i < len(offsets):
            out[(part, offset)] = times[i] - sent_at
    return out


class PositionsPoller(threading.Thread):
    """Reads what a system has published every ``interval`` s and keeps when each new state
    was first seen. ``read(client)`` gives ``(mark, positions)``: a new mark is a new state
    (a snapshot id; by default the positions themselves)."""

    def __init__(self, redis_url: str, read: Callable[[redis.Redis], tuple[Any, dict[str, int]]],
                 interval: float = 0.01) -> None:
        super().__init__(name="positions-poller", daemon=True)
        self.client = redis.Redis.from_url(redis_url)
        self.read, self.interval = read, interval
        self.seen: Seen = []
        self._last: Any = None
        self.stop_event = threading.Event()
        self.redis_errors = 0
        self.last_redis_error: str | None = None
        self.failure: Exception | None = None  # what ended the thread early; finish() raises it

    @classmethod
    def of_hash(cls, redis_url: str, key: str, interval: float = 0.01) -> PositionsPoller:
        """A poller of a positions hash (partition -> next offset)."""
        def read(client: redis.Redis) -> tuple[Any, dict[str, int]]:
            positions = {k.decode(): int(v) for k, v in cast(Hash, client.hgetall(key)).items()}
            return (positions or None), positions
        return cls(redis_url, read, interval)

    @classmethod
    def of_snapshot(cls, redis_url: str, id_key: str, positions_key: str, interval: float = 0.01) -> PositionsPoller:
        """A poller of a published snapshot's id and positions, read together (MULTI)."""
        def read(client: redis.Redis) -> tuple[Any, dict[str, int]]:
            pipe = client.pipeline(transaction=True)
            pipe.get(id_key)
            pipe.hgetall(positions_key)
            sid, positions = pipe.execute()
            return sid, {k.decode(): int(v) for k, v in positions.items()}
        return cls(redis_url, read, interval)

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                self.poll()
                time.sleep(self.interval)
            self.poll()  # what was published last
        except Exception as exc:  # noqa: BLE001 - finish() raises it in the bench's thread
            self.failure = exc
        finally:
            self.client.close()

    def poll(self) -> None:
        """One read; a Redis error (``BUSY`` while a long script runs, a restart) is counted in
        :attr:`redis_errors` and the next interval reads again."""
        try:
            mark, positions = self.read(self.client)
        except redis.RedisError as exc:
            self.redis_errors += 1
            self.last_redis_error = f"{exc.__class__.__name__}: {exc}"
            return
        if mark is not None and mark != self._last:
            self._last = mark
            self.seen.append((time.time(), positions))

    def total(self) -> int:
        return sum(self.seen[-1][1].values()) if self.seen else 0

    def finish(self) -> None:
        """Stop polling; raise what ended the thread early, if anything did."""
        self.stop_event.set()
        self.join()
        if self.failure is not None:
            raise RuntimeError(f"the positions poller stopped: {self.failure!r}") from self.failure


@dataclass
class Latency:
    """Open-loop reads: how many, how fast, how long (from when each was due)."""

    requests: int = 0
    errors: int = 0
    not_found: int = 0  # answered, but found nothing (not an error)
    achieved_rps: float = 0.0
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None


def paced_load(make_call: Callable[[], tuple[Callable[[int], Any], Callable[[], Any]]], rate: float,
               seconds: float, threads: int = 8) -> Latency:
    """Open loop: request ``i`` is due at ``start + i / rate``; ``threads`` threads take them
    in turn, each with its own client (``make_call()`` gives ``(call(i), close)``). Latency
    from the due time, so a reader that falls behind is charged for the queue. A call that
    returns False found nothing (counted apart, not an error)."""
    total = int(rate * seconds)
    counter = itertools.count()
    latencies: list[float] = []
    errors, not_found = [0], [0]
    begin = time.perf_counter() + 0.2

    def worker() -> None:
        call, close = make_call()
        try:
            while (i := next(counter)) < total:
                due = begin + i / rate
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
    took = time.perf_counter() - begin
    p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
    return Latency(requests=len(latencies), errors=errors[0], not_found=not_found[0],
                   achieved_rps=len(latencies) / took, p50_ms=None if p50 is None else p50 * 1000,
                   p99_ms=None if p99 is None else p99 * 1000, max_ms=max(latencies, default=0.0) * 1000)


# -- traffic -----------------------------------------------------------------------------
@dataclass
class Paced:
    """What :func:`produce_paced` sent."""

    samples: list[list[Any]]  # [partition, offset, sent at (wall clock), line number] of the sampled lines
    seconds: float  # sending, until the last line was handed to the client
    flushed_s: float  # until every line was acknowledged
    errors: int

    def sent(self) -> dict[tuple[int, int], float]:
        return {(p, o): at for p, o, at, _ in self.samples}


def produce_paced(brokers: str, topic: str, lines: Iterable[bytes], rate: float, key_field: str,
                  sample_every: int = 0, stop: threading.Event | None = None, stop_at: float | None = None,
                  check_every: int = 20) -> Paced:
    """Produce ``lines`` at ``rate`` a second, keyed by ``key_field``, until the end, ``stop``
    or the wall clock ``stop_at``; every ``sample_every``-th line's send time is kept by its
    (partition, offset) once delivered."""
    producer = reliable_producer(brokers, **{"linger.ms": 5, "queue.buffering.max.messages": 1_000_000})
    samples: list[list[Any]] = []
    errors = [0]

    def sampled(at: float, i: int) -> Callable[[Any, Any], None]:
        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                samples.append([msg.partition(), msg.offset(), at, i])
            else:
                errors[0] += 1
        return delivered

    def counted(err: Any, _msg: Any) -> None:
        if err is not None:
            errors[0] += 1

    produce, poll = producer.produce, producer.poll
    begin = time.perf_counter()
    for i, line in enumerate(lines):
        if i % check_every == 0:
            if (stop is not None and stop.is_set()) or (stop_at is not None and time.time() > stop_at):
                break
            ahead = begin + i / rate - time.perf_counter()
            if ahead > 0.001:
                time.sleep(ahead)
            poll(0)
        callback = sampled(time.time(), i) if sample_every and i % sample_every == 0 else counted
        while True:
            try:
                produce(topic, key=field_key(line, key_field), value=line, on_delivery=callback)
                break
            except BufferError:
                poll(0.01)
    seconds = time.perf_counter() - begin
    producer.flush(120)
    return Paced(samples, seconds, time.perf_counter() - begin, errors[0])


def read_lines(path: Path, limit: int | None = None) -> list[bytes]:
    """The first ``limit`` lines of ``path`` (all by default), without their newline."""
    with open(path, "rb") as f:
        return [line.rstrip(b"\n") for line in itertools.islice(f, limit)]


def paced_child(brokers: str, topic: str, path: str, rate: float, key_field: str, count: int | None = None,
                sample_every: int = 0, stop_at: float | None = None, result_path: str | None = None) -> None:
    """A child process's :func:`produce_paced` of the first ``count`` lines of ``path`` (a
    process of its own: its sending takes nothing from the readers' interpreter); writes
    what it sent (:class:`Paced`) to ``result_path`` as JSON."""
    paced = produce_paced(brokers, topic, read_lines(Path(path), count), rate, key_field, sample_every,
                          stop_at=stop_at)
    if result_path is not None:
        Path(result_path).write_bytes(orjson.dumps(asdict(paced)))


def spawn(target: Callable[..., None], *args: Any) -> Any:
    """``target(*args)`` in a fresh interpreter (``spawn``: no copy of this process's memory)."""
    import multiprocessing

    proc = multiprocessing.get_context("spawn").Process(target=target, args=args, daemon=True)
    proc.start()
    return proc


def end_child(proc: Any) -> None:
    """Stop a :func:`spawn`-ed process that may still run."""
    if proc is not None and proc.is_alive():
        proc.terminate()
        proc.join(10)


# -- profiles ----------------------------------------------------------------------------
def py_spy(cmd: list[str], out: Path, fmt: str, rate: int = 100, subprocesses: bool = False) -> Timed:
    """``cmd`` recorded by ``py-spy record --native`` (Python and native frames) into ``out``
    (``fmt``: flamegraph, or raw for collapsed stacks); the seconds and CPU seconds of
    py-spy and the command together (the peak memory is not taken: 0)."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    started = time.perf_counter()
    proc = subprocess.Popen([spy, "record", "--native", *(["--subprocesses"] if subprocesses else []), "-r", str(rate),
                             "-f", fmt, "-o", str(out), "--", *cmd], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    stderr = proc.stderr
    assert stderr is not None  # a pipe
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(stderr.read().decode()[-2000:])
    stderr.close()
    return Timed(seconds, 0, usage.ru_utime + usage.ru_stime)


IDLE_FRAMES = ("Condition.wait", "Queue.get", "Event.wait", "time_sleep", "poll (libc")
"""Frames of a thread waiting for work, a reply or time: py-spy ``--native`` counts them."""


def profile_shares(collapsed: Path, parts: dict[str, tuple[str, ...]], generic: dict[str, tuple[str, ...]] | None = None,
                   idle: tuple[str, ...] = IDLE_FRAMES, rest: str = "Bytewax runtime and the rest") -> dict[str, float]:
    """Shares of a py-spy ``raw`` profile's busy samples by part of the flow: a frame whose
    name holds a key of ``parts`` counts for that part (innermost frame first, first match
    wins); ``generic`` (library frames) only where no frame names a part."""
    counts: Counter[str] = Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        frames = [f for f in stack.split(";")[::-1] if not f.startswith("process ")]  # py-spy's root: a command line
        if any(i in f for f in frames for i in idle):
            continue
        total += int(n)
        part = next((name for frame in frames for name, keys in parts.items() if any(k in frame for k in keys)),
                    None) or next((name for frame in frames for name, keys in (generic or {}).items()
                                   if any(k in frame for k in keys)), rest)
        counts[part] += int(n)
    return {part: n / total for part, n in counts.most_common()} if total else {}


# -- results -----------------------------------------------------------------------------
@dataclass
class Result:
    """What every benchmark's result records (``write_results``, read back by :func:`load_result`):
    its configuration, the machine it ran on, and the targets it was held to (``targets``: what
    each target is and whether it was met). A benchmark's result subclasses it with its parts,
    every one with a default."""

    config: dict[str, Any]
    machine: dict[str, Any]
    targets: dict[str, Any] = field(default_factory=dict)


@dataclass
class PartsResult(Result):
    """A result whose parts may be measured one run at a time into one report (:func:`keep_previous`):
    ``measured`` says, per part, when, how long and with which configuration it was measured."""

    measured: dict[str, dict[str, Any]] = field(default_factory=dict)


R = TypeVar("R", bound=PartsResult)


def machine(memory: bool = False) -> dict[str, Any]:
    """The machine a result was measured on."""
    out: dict[str, Any] = {"cpus": os.cpu_count(), "python": platform.python_version(),
                           "platform": platform.platform()}
    if memory:
        out["memory_bytes"] = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return out


class PartClock:
    """When, how long, and how loaded the machine was while one part of a benchmark ran."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.load = os.getloadavg()
        self.busy = busy_cpu_seconds()

    def wall(self) -> float:
        return time.perf_counter() - self.started

    def measured(self, wall: float, config: dict[str, Any], wall_s: float | None = None,
                 **extra: Any) -> dict[str, Any]:
        """The ``measured`` entry of the part (``wall_s``: the part's own, if not ``wall``)."""
        return {"at": datetime.now(UTC).isoformat(timespec="seconds"),
                "wall_s": round(wall if wall_s is None else wall_s, 1),
                "loadavg_before_after": [self.load, os.getloadavg()],
                "machine_busy_cores": round((busy_cpu_seconds() - self.busy) / wall, 2), **extra, "config": config}


def load_result(cls: Any, data: Any) -> Any:
    """A result written as JSON (``asdict``), back as the dataclasses its fields name."""
    return _typed(cls, data)


def _typed(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [h for h in typing.get_args(hint) if h is not type(None)]
        return _typed(inner[0], value) if len(inner) == 1 else value
    if origin is list:
        (item,) = typing.get_args(hint)
        return [_typed(item, v) for v in value]
    if origin is dict:
        _, item = typing.get_args(hint)
        return {k: _typed(item, v) for k, v in value.items()}
    if isinstance(hint, type) and is_dataclass(hint):
        hints = typing.get_type_hints(hint)
        return hint(**{k: _typed(hints[k], v) for k, v in value.items()})
    return value


def keep_previous(result: R, json_path: Path, parts: Iterable[str],
                  targets: Callable[[Any], dict[str, Any]]) -> R:
    """Parts this run did not measure are kept from the previous ``json_path`` (each part
    says when and with which configuration it was measured), so the parts of a 2-core
    machine's long benchmark can be run one at a time into one report."""
    if not json_path.exists():
        return result
    try:
        previous = load_result(type(result), json.loads(json_path.read_text()))
    except (ValueError, TypeError, KeyError):
        return result
    for name in parts:
        if getattr(result, name) is None and getattr(previous, name) is not None:
            setattr(result, name, getattr(previous, name))
            if name in previous.measured:
                result.measured[name] = previous.measured[name]
    result.targets = targets(result)
    return result


def write_results(result: Any, out: Path, name: str, draw: Callable[[Any, Path], None]) -> tuple[Path, Path]:
    """``out/NAME.json`` (the result as it is) and ``out/NAME.png`` (``draw(result, path)``).
    Without matplotlib (the bench extras) the chart is left out with one line saying so:
    the figures, minutes in the making, are in the JSON and the summary all the same."""
    out.mkdir(parents=True, exist_ok=True)
    json_path, png_path = out / f"{name}.json", out / f"{name}.png"
    data = asdict(result)
    for summary in ("targets", "measured"):  # after the parts, where the files have always had them
        if summary in data:
            data[summary] = data.pop(summary)
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    try:
        draw(result, png_path)
    except ModuleNotFoundError as exc:
        if exc.name != "matplotlib":
            raise
        print(f"[bench] no {png_path.name}: matplotlib is not installed (make bench installs the bench extras, "
              "or pip install 'rankflow[bench]')", file=sys.stderr)
    return json_path, png_path


def report(result: Any, out: Path, write: Callable[[Any, Path], tuple[Path, Path]],
           show: Callable[[Any], None]) -> None:
    """Write the result files (``write``), then show the summary of what they hold (``show``:
    read back, so parts kept from an earlier run are shown too)."""
    json_path, png_path = write(result, out)
    show(load_result(type(result), json.loads(json_path.read_text())))
    print(wrote(json_path, png_path))


def wrote(json_path: Path, png_path: Path) -> str:
    """The line saying which result files a benchmark wrote (the chart only if it was drawn)."""
    return f"wrote {json_path} and {png_path}" if png_path.exists() else f"wrote {json_path}"


Panel = Callable[[Any], None]
"""Draws one chart on a matplotlib ``Axes``."""


def chart(path: Path, title: str, panels: Sequence[Panel], size: tuple[float, float], cols: int = 3,
          dpi: int = 100) -> None:
    """A figure of ``panels`` (each ``size`` inches, up to ``cols`` a row) saved to ``path``.
    matplotlib is imported here only: a benchmark that draws nothing does not need it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(cols, max(len(panels), 1))
    rows = -(-max(len(panels), 1) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(size[0] * cols, size[1] * rows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    for ax, panel in zip(axes.flat, panels):
        panel(ax)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


CPU_PARTS = (("own", "#2b7bba"), ("redis", "#d9534f"), ("broker", "#909090"))


def cpu_per_million(own_s: float, redis_s: float, broker_s: float, events: int) -> dict[str, float]:
    """CPU seconds per million events of a system's own processes, Redis and the broker, and
    their sum: what an operator pays for (issue 21 holds rankflow to half the baseline's).

    >>> cpu_per_million(2.0, 1.0, 0.5, 500_000)
    {'own': 4.0, 'redis': 2.0, 'broker': 1.0, 'total': 7.0}
    """
    per_m = 1e6 / events
    own, red, broker = own_s * per_m, redis_s * per_m, broker_s * per_m
    return {"own": round(own, 3), "redis": round(red, 3), "broker": round(broker, 3),
            "total": round(own + red + broker, 3)}


def cpu_bars(ax: Any, labels: list[str], per_1m: list[dict[str, float]], title: str) -> None:
    """Stacked bars of :func:`cpu_per_million` figures, one per system, the total above each."""
    bottom = [0.0] * len(labels)
    for part, color in CPU_PARTS:
        vals = [c.get(part, 0.0) for c in per_1m]
        ax.bar(labels, vals, bottom=bottom, color=color, label=part)
        bottom = [b + v for b, v in zip(bottom, vals)]
    label_bars(ax, bottom, ".1f", fontsize=8)
    ax.set_ylabel("CPU seconds per 1M events")
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)


def label_bars(ax: Any, values: list[float], spec: str = ",.0f", unit: str = "", fontsize: Any = None) -> None:
    """Each bar's value above it."""
    for i, v in enumerate(values):
        ax.text(i, v, f"{v:{spec}}{unit}", ha="center", va="bottom", fontsize=fontsize)


def print_table(title: str, rows: list[tuple[str, str, str, str]], width: int) -> None:
    """The (what, flow, baseline, target) rows of a benchmark's summary."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, show_lines=True)
    for column in ("what", "flow", "baseline", "target"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*row)
    Console(width=width).print(table)


# -- the rig -----------------------------------------------------------------------------
class Rig:
    """A benchmark's own Redis and broker, its work folder, and the commands of the flows."""

    def __init__(self, seed: int = 1) -> None:
        self.seed = seed
        self.work = Path(tempfile.mkdtemp(prefix="rankflow-bench-"))
        self.redis = LocalRedis(free_port(), self.work / "redis")
        self.broker = LocalTansu(free_port(), self.work / "tansu")
        self.client: redis.Redis | None = None

    def __enter__(self) -> Self:
        self.redis.start()
        self.broker.start()
        self.client = redis.Redis.from_url(self.redis.url)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.client is not None:
            self.client.close()
        self.broker.stop()
        self.redis.stop()
        shutil.rmtree(self.work, ignore_errors=True)  # its logs, topics' files and recovery directories

    def log(self, message: str) -> None:
        print(f"[bench] {message}", file=sys.stderr, flush=True)

    @property
    def redis_url(self) -> str:
        return self.redis.url

    @property
    def brokers(self) -> str:
        return self.broker.url

    def produce(self, path: Path, topic: str, partitions: int, key_field: str = "user_id") -> float:
        """Produce the log at ``path`` to ``topic``; the seconds it took."""
        self.log(f"producing {path} to {topic} ({partitions} partitions)")
        started = time.perf_counter()
        produce_file(str(path), KafkaEndpoint(self.brokers, topic), partitions, progress=False, key_field=key_field)
        return time.perf_counter() - started

    def flow_cmd(self, flow: str, topic: str, namespace: str, *extra: str) -> list[str]:
        """``rankflow run`` of ``flow`` on ``topic`` into ``namespace``; dead letters in the work folder."""
        return [sys.executable, "-m", "rankflow.cli", "run", *(("--flow", flow) if flow != "listeners" else ()),
                "--input", f"kafka:{self.brokers}/{topic}", "--redis", self.redis_url, "--namespace", namespace,
                "--dead-letter", f"jsonl:{self.work / (namespace + '.dead.jsonl')}", *extra]

    def baseline_cmd(self, module: str, topic: str, *args: str) -> list[str]:
        """``python -m rankflow.bench.MODULE`` (a baseline) reading ``topic`` into this rig's Redis."""
        return [sys.executable, "-m", f"rankflow.bench.{module}", "--brokers", self.brokers, "--topic", topic,
                "--redis", self.redis_url, *args]

    def stderr(self, name: str) -> Path:
        return self.work / f"{name}.stderr"

    def start(self, cmd: list[str], name: str) -> subprocess.Popen:
        """:func:`start` with standard error in the work folder as ``NAME.stderr``."""
        return start(cmd, self.stderr(name))

    def timed(self, cmd: list[str], name: str) -> Timed:
        """:func:`timed` with standard error in the work folder as ``NAME.stderr``."""
        return timed(cmd, self.stderr(name))

    def services_cpu(self) -> tuple[float, float]:
        """CPU seconds the broker and Redis have spent so far."""
        return cpu_seconds(self.broker.pid()), cpu_seconds(self.redis.pid())

    def services_pids(self) -> dict[str, int | None]:
        return {"broker": self.broker.pid(), "redis": self.redis.pid()}

    def flush(self) -> None:
        assert self.client is not None
        flush_redis(self.client)

    def used_memory(self) -> int:
        assert self.client is not None
        return used_memory(self.client)


class OnRig:
    """What a product's benchmark reaches through its :class:`Rig` (``self.rig``), and where
    it keeps its generated logs across runs (``data/``)."""

    def __init__(self, seed: int) -> None:
        self.rig = Rig(seed)
        self.work = self.rig.work
        self.data = Path("data")

    def log(self, message: str) -> None:
        self.rig.log(message)

    @property
    def client(self) -> redis.Redis:
        assert self.rig.client is not None, "the rig is not running"
        return self.rig.client

    @property
    def redis_url(self) -> str:
        return self.rig.redis_url

    @property
    def brokers(self) -> str:
        return self.rig.brokers

    def flush(self) -> None:
        self.rig.flush()

    def used_memory(self) -> int:
        return self.rig.used_memory()


Measure = Callable[[Any, Any], None]
"""One part of a benchmark: ``measure(bench, result)`` fills the part's figures in ``result``."""


def run_parts(bench: OnRig, result: Any, measures: dict[str, Measure], chosen: Iterable[str],
              record: Callable[[str, PartClock, float], None]) -> None:
    """The ``chosen`` parts, in the order of ``measures``, on the bench's rig (its services
    and work folder gone after); ``record(part, clock, wall)`` after each part."""
    chosen = set(chosen)
    unknown = chosen - set(measures)
    if unknown:
        raise ValueError(f"unknown parts {sorted(unknown)}: choose from {', '.join(measures)}")
    bench.data.mkdir(exist_ok=True)
    try:
        with bench.rig:
            for part, measure in measures.items():
                if part in chosen:
                    clock = PartClock()
                    measure(bench, result)
                    wall = clock.wall()
                    record(part, clock, wall)
                    bench.log(f"{part}: {wall:.0f} s wall")
    finally:
        shutil.rmtree(bench.work, ignore_errors=True)
