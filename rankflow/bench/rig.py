"""What every benchmark shares: local services, the systems' commands, and a backlog run.

A :class:`Rig` starts its own Redis and Kafka-protocol broker (Tansu) on free ports,
produces generated logs to topics, and runs each system as its own process on a
backlog, timing the whole process (start-up included, as an operator would see it)
and the CPU the broker and Redis spent meanwhile (they share the machine's cores).
The systems:

* ``rankflow``: ``rankflow run --until-eof``, one process;
* ``rankflow_durable``: the same with a fresh ``--recovery-dir`` (what production runs);
* ``rankflow_2p``, ``rankflow_durable_2p``: the same with ``--processes 2``;
* ``baseline`` / ``baseline_lean``: the seed's design, full or lean
  (``rankflow.bench.baseline``), whose state is in Redis.

Every run's ranking is compared with the first one's on the same topic: a benchmark
of a system that counts wrong measures nothing.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from rankflow.connectors.kafka import KafkaEndpoint
from rankflow.connectors.redis_read import read_latest
from rankflow.generate import generate
from rankflow.produce import produce_file
from rankflow.services import LocalRedis, LocalTansu, free_port

SYSTEMS = ("rankflow", "rankflow_durable", "rankflow_2p", "rankflow_durable_2p", "baseline", "baseline_lean")


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


def _cpu_seconds(pid: int | None) -> float:
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Rig:
    def __init__(self, seed: int = 1) -> None:
        self.seed = seed
        self.work = Path(tempfile.mkdtemp(prefix="rankflow-bench-"))
        self.redis = LocalRedis(free_port(), self.work / "redis")
        self.broker = LocalTansu(free_port(), self.work / "tansu")
        self.client: redis.Redis | None = None
        self.rankflow_extra: list[str] = []  # options every ``rankflow run`` of the rig gets (e.g. --recent-minutes 0)

    def __enter__(self) -> "Rig":
        self.redis.start()
        self.broker.start()
        self.client = redis.Redis.from_url(self.redis.url)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.client is not None:
            self.client.close()
        self.broker.stop()
        self.redis.stop()

    def log(self, message: str) -> None:
        print(f"[bench] {message}", file=sys.stderr, flush=True)

    # -- logs and topics ------------------------------------------------------------
    def log_file(self, events: int, users: int, songs: int) -> Path:
        """A generated log with chaos, kept in ``data/`` across benchmark runs."""
        path = Path("data") / f"bench-{events}-{users}-{songs}.jsonl"
        if not path.exists():
            self.log(f"generating {path}")
            generate(users, songs, events, seed=self.seed, out=path)
        return path

    def produce(self, log: Path, topic: str, partitions: int) -> None:
        self.log(f"producing {log} to {topic} ({partitions} partitions)")
        produce_file(str(log), KafkaEndpoint(self.broker.url, topic), partitions, progress=False)

    # -- the systems ----------------------------------------------------------------
    def rankflow_cmd(self, topic: str, namespace: str, *extra: str) -> list[str]:
        return [sys.executable, "-m", "rankflow.cli", "run", "--input", f"kafka:{self.broker.url}/{topic}",
                "--redis", self.redis.url, "--namespace", namespace,
                "--dead-letter", f"jsonl:{self.work / (namespace + '.dead.jsonl')}", *self.rankflow_extra, *extra]

    def baseline_cmd(self, topic: str, namespace: str, *extra: str) -> list[str]:
        return [sys.executable, "-m", "rankflow.bench.baseline", "--brokers", self.broker.url, "--topic", topic,
                "--redis", self.redis.url, "--namespace", namespace, *extra]

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
        return self.baseline_cmd(topic, namespace, "--variant", variant)

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

    def backlog(self, system: str, topic: str, events: int, k: int = 100) -> BacklogRun:
        """Run ``system`` over the whole topic; its time, CPU beside it, and its top ``k``."""
        namespace = f"{system}-{topic}"
        broker_before, redis_before = _cpu_seconds(self.broker.pid()), _cpu_seconds(self.redis.pid())
        seconds, rss = self.timed(self.command(system, topic, namespace))
        run = BacklogRun(system, seconds, events / seconds, rss,
                         _cpu_seconds(self.broker.pid()) - broker_before,
                         _cpu_seconds(self.redis.pid()) - redis_before, self.top(system, namespace, k))
        self.log(f"{system} on {topic}: {run.events_per_s:,.0f} events/s ({seconds:.2f} s; broker "
                 f"{run.broker_cpu_s:.1f} CPU-s, Redis {run.redis_cpu_s:.1f} CPU-s)")
        return run

    def top(self, system: str, namespace: str, k: int) -> list[tuple[str, int]]:
        assert self.client is not None
        if system.startswith("rankflow"):
            return [(i["song_id"], i["listeners"]) for i in read_latest(self.client, namespace)["items"][:k]]
        pairs = self.client.zrange("{" + namespace + "}:songs", 0, k - 1, desc=True, withscores=True)
        return [(song.decode(), int(count)) for song, count in pairs]


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

