"""``rankflow bench-activity``: the logs it writes, and the count of a log it compares with."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from rankflow.bench.activity.results import HOUR_MS, MEMORY_START_MS
from rankflow.bench.activity_baseline import BUCKET_MS
from rankflow.connectors.kafka import reliable_producer
from rankflow.produce import field_key


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
    bad, compared = 0, 0
    examples: list[str] = []
    for ws, channels in want.items():
        mine = got.get(ws, {})
        for ch in set(mine) | set(channels):
            compared += 1
            if mine.get(ch) != channels.get(ch):
                bad += 1
                if len(examples) < 10:
                    examples.append(f"{ws}/{ch}: {mine.get(ch)} (log: {channels.get(ch)})")
    return bad, compared, examples


