"""``rankflow bench-activity``: the rig with the activity systems, their logs, and how each is read."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, cast

import orjson

from rankflow.bench.activity.logs import LogIndex
from rankflow.bench.activity.results import ActivityBenchConfig
from rankflow.bench.activity_baseline import BaselineKeys
from rankflow.bench.rig import OnRig
from rankflow.connectors.redis_generations import current_generation
from rankflow.connectors.redis_keys import Keys, activity_namespace
from rankflow.connectors.redis_replies import Hash, Members


class ActivityBench(OnRig):
    """The systems on one rig: ``baseline`` (``rankflow.bench.activity_baseline``, ``EXPIRE``
    per message), ``baseline_lean`` (one ``EXPIRE`` per key per batch), ``flow`` (``rankflow
    run --flow activity --until-eof``) and ``flow_durable`` (the same with a fresh
    ``--recovery-dir``); each part of the benchmark is a module of this package."""

    def __init__(self, cfg: ActivityBenchConfig) -> None:
        super().__init__(cfg.seed)
        self.cfg = cfg
        self._index: LogIndex | None = None
        self._produced: set[str] = set()

    # -- commands ---------------------------------------------------------------------
    def flow_cmd(self, topic: str, namespace: str, *extra: str) -> list[str]:
        stage = ("--publish-stage", str(self.cfg.publish_stage)) if self.cfg.publish_stage is not None else ()
        return self.rig.flow_cmd("activity", topic, namespace, *stage, *extra)

    def baseline_cmd(self, topic: str, prefix: str, *extra: str) -> list[str]:
        return self.rig.baseline_cmd("activity_baseline", topic, "--prefix", prefix, *extra)

    def command(self, system: str, topic: str, name: str) -> list[str]:
        if system == "baseline":
            return self.baseline_cmd(topic, name)
        if system == "baseline_lean":
            return self.baseline_cmd(topic, name, "--expire", "per-batch")
        extra = ["--until-eof"]
        if system == "flow_durable":
            extra += ["--recovery-dir", str(self.work / f"{name}.recovery")]
        return self.flow_cmd(topic, name, *extra)

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
        seconds = self.rig.produce(path, topic, self.cfg.partitions)
        self._produced.add(topic)
        return seconds

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
        ans = activity_namespace(namespace)
        return Keys(ans, current_generation(self.client, ans))

    def flow_snapshot(self, namespace: str) -> dict[str, Any]:
        raw = self.client.get(self.flow_keys(namespace).snapshot)
        if raw is None:
            raise RuntimeError(f"the flow published nothing in {namespace}")
        return json.loads(raw)

    def flow_counts(self, namespace: str, workspaces: list[str]) -> dict[str, dict[str, int]]:
        keys = self.flow_keys(namespace)
        slots = {ws.decode(): slot.decode() for ws, slot in cast(Hash, self.client.hgetall(keys.workspace_slots)).items()}
        pipe = self.client.pipeline(transaction=False)
        for ws in workspaces:
            pipe.zrange(keys.workspace(ws, slots.get(ws, "a")), 0, -1, withscores=True)
        return {ws: {ch.decode(): int(n) for ch, n in entries} for ws, entries in zip(workspaces, pipe.execute())}

    def flow_all_counts(self, namespace: str) -> dict[tuple[str, str], int]:
        keys = self.flow_keys(namespace)
        workspaces = sorted(ws.decode() for ws in cast(Members, self.client.smembers(keys.workspaces)))
        return {(ws, ch): n for ws, chs in self.flow_counts(namespace, workspaces).items() for ch, n in chs.items()}

    def baseline_buckets(self, prefix: str, workspaces: list[str], first: int,
                         last: int) -> dict[str, dict[tuple[str, int], int]]:
        """The baseline's counts per (channel, bucket) of ``workspaces`` over buckets ``first .. last``."""
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

