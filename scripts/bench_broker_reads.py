"""The broker's CPU per 1M messages when a backlog is read the flow's way or the baseline's way.

Why: ``bench-boards`` counts the broker's CPU in each result's cost, and the flow's reads
cost the local broker several times the baseline's. This reads one topic both ways (no
Redis, no flow) so consumer settings can be compared in seconds:

- ``baseline``: one consumer for every partition, as ``bench/boards_baseline.py`` reads;
- ``flow``: the source's own partitions (``connectors.kafka._KafkaPartition``, one consumer
  each), read in turn with their ``idle_poll`` between empty reads, as a Bytewax worker does;
- ``idle``: the flow's consumers sitting at the end of their partitions for ``--idle-s``.

``--work-us`` sleeps that many microseconds per message read, standing in for the flow's
own work: a slower reader leaves the consumers at the end of their prefetched partitions
longer. ``-X key=value`` overrides a consumer setting of the flow's consumers (repeatable).
The broker's CPU is read from /proc, as ``bench-boards`` does (``bench.rig.cpu_seconds``).

    .venv/bin/python scripts/bench_broker_reads.py --data /tmp/bench-ab/data/boards.jsonl \\
        --modes baseline,flow --reps 3 --work-us 8
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from rankflow.bench import rig
from rankflow.connectors import kafka
from rankflow.connectors.kafka import KafkaEndpoint, KafkaSource
from rankflow.produce import produce_file
from rankflow.services import LocalTansu, free_port


def read_baseline(brokers: str, topic: str, parts: list[int], work_us: float) -> int:
    consumer = Consumer({"bootstrap.servers": brokers, "group.id": "boards-baseline", "enable.auto.commit": False,
                         "enable.partition.eof": True, "fetch.wait.max.ms": 10})
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    ended: set[int] = set()
    n = 0
    try:
        while len(ended) < len(parts):
            got = 0
            for m in consumer.consume(500, 0.05):
                err = m.error()
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, err
                    ended.add(m.partition() or 0)
                    continue
                got += 1
            n += got
            if got and work_us:
                time.sleep(got * work_us / 1e6)
    finally:
        consumer.close()
    return n


def flow_parts(brokers: str, topic: str) -> list[Any]:
    source = KafkaSource(KafkaEndpoint(brokers, topic), until_eof=True)
    return [source.build_part("in", name, None) for name in source.list_parts()]


def read_flow(brokers: str, topic: str, work_us: float) -> int:
    parts = flow_parts(brokers, topic)
    idle = parts[0].idle_poll.total_seconds()
    due = [0.0] * len(parts)
    live = list(range(len(parts)))
    n = 0
    try:
        while live:
            now = time.monotonic()
            ready = [i for i in live if due[i] <= now]
            if not ready:
                time.sleep(max(0.0, min(due[i] for i in live) - now))
                continue
            for i in ready:
                try:
                    batch = parts[i].read()
                except StopIteration:
                    live.remove(i)
                    continue
                if batch is None:
                    due[i] = time.monotonic() + idle
                    continue
                n += len(batch.records)
                if work_us:
                    time.sleep(len(batch.records) * work_us / 1e6)
    finally:
        for p in parts:
            p.close()
    return n


def idle_cost(brokers: str, topic: str, pid: int, seconds: float) -> float:
    """The broker's CPU-s per second while the flow's consumers wait at the end of the log."""
    parts = flow_parts(brokers, topic)
    for p in parts:
        p._until_eof = False
    idle = parts[0].idle_poll.total_seconds()
    try:
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < 1.0:
            for p in parts:
                if p.read() is not None:
                    quiet_since = time.monotonic()
            time.sleep(idle)
        cpu0, t0 = rig.cpu_seconds(pid), time.monotonic()
        while time.monotonic() - t0 < seconds:
            for p in parts:
                p.read()
            time.sleep(idle)
        return (rig.cpu_seconds(pid) - cpu0) / (time.monotonic() - t0)
    finally:
        for p in parts:
            p.close()


def override_consumer(settings: dict[str, str]) -> None:
    """Make the flow's partitions use ``settings`` over their own."""
    if not settings:
        return
    made = kafka._consumer

    def consumer(brokers: str, until_eof: bool, s: Any = kafka.NO_SETTINGS, /, **extra: object) -> Consumer:
        return made(brokers, until_eof, s, **{**extra, **settings})

    kafka._consumer = consumer  # type: ignore[assignment]  # a benchmark's override, this process only


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default="/tmp/bench-ab/data/boards.jsonl")
    p.add_argument("--key-field", default="player_id")
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--modes", default="baseline,flow")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--work-us", type=float, default=0.0, help="sleep per message read: the reader's own work")
    p.add_argument("--idle-s", type=float, default=5.0)
    p.add_argument("-X", action="append", default=[], metavar="KEY=VALUE", help="a setting of the flow's consumers")
    a = p.parse_args(argv)
    override_consumer(dict(x.split("=", 1) for x in a.X))
    modes = a.modes.split(",")
    with tempfile.TemporaryDirectory() as work:
        broker = LocalTansu(free_port(), work).start()
        try:
            pid = broker.pid()
            assert pid is not None
            topic = "backlog"
            produced = produce_file(a.data, KafkaEndpoint(broker.url, topic), a.partitions, progress=False,
                                    key_field=a.key_field).messages
            parts = list(range(a.partitions))
            figures: dict[str, list[float]] = {m: [] for m in modes}
            for rep in range(a.reps):
                for mode in modes if rep % 2 == 0 else list(reversed(modes)):
                    if mode == "idle":
                        per_s = idle_cost(broker.url, topic, pid, a.idle_s)
                        figures[mode].append(per_s)
                        print(f"rep {rep + 1} idle: broker {per_s:.3f} CPU-s per second at the end", flush=True)
                        continue
                    cpu0, t0 = rig.cpu_seconds(pid), time.monotonic()
                    n = (read_baseline(broker.url, topic, parts, a.work_us) if mode == "baseline"
                         else read_flow(broker.url, topic, a.work_us))
                    cpu, wall = rig.cpu_seconds(pid) - cpu0, time.monotonic() - t0
                    assert n == produced, (mode, n, produced)
                    figures[mode].append(cpu * 1e6 / n)
                    print(f"rep {rep + 1} {mode}: {n} messages in {wall:.1f} s; broker {cpu:.2f} CPU-s, "
                          f"{cpu * 1e6 / n:.2f} per 1M", flush=True)
            for mode, values in figures.items():
                unit = "CPU-s per second idle" if mode == "idle" else "CPU-s per 1M"
                print(f"median {mode}: broker {statistics.median(values):.3f} {unit} ({a.X or 'flow defaults'})")
        finally:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
