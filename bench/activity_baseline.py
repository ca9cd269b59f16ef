"""The activity flow's baseline: the seed's design (ZINCRBY per message into per-minute sorted sets).

The activity flow (``rankflow run --flow activity``) is measured side by side with the
design it replaces (``seeds/003``), on the same backlog from the same local broker, and
their window counts are compared: a benchmark of a system that counts wrong measures
nothing. The seed's design:

* **Ingest**: a Kafka consumer takes each message's workspace and channel, puts it in its
  one-minute bucket ``bucket = ts // 60000`` and does ``ZINCRBY active:{ws}:{bucket} 1
  channel`` and ``EXPIRE active:{ws}:{bucket} 3660``, pipelined (``BATCH`` messages per
  round trip). Here every message passes the activity flow's own validation first
  (``state.message_events.parse_message_records``, docs/semantics/windows.md 1 checks 1-3), so both
  systems do the same work per message; an invalid one is counted and skipped.
  ``expire="per-message"`` (the seed, literally) sends an ``EXPIRE`` with every
  ``ZINCRBY``; ``expire="per-batch"`` (the lean variant) one per bucket key per
  pipelined batch, after its increments: the same TTLs, half the commands.
* **Read**: a workspace's top K is ``ZUNIONSTORE`` of the window's 60 bucket keys into a
  result key, cached 5 s (``PEXPIRE``; the seed's "pre-computed every 5 s ... cached 5 s"),
  then ``ZREVRANGE 0 K-1``. A channel's count and rank are ``ZSCORE`` and ``ZREVRANK``
  on the same cached union. One Lua script per query (:data:`READ_LUA`), so a query is
  one round trip, as the flow's reader is; the script names every key it touches.

**The TTL, relative to event time.** The seed sets ``EXPIRE 3660`` on each write, in a
live stream where event time is about wall time: a bucket then lives about an hour
after its last write. Replaying a backlog (a benchmark, a rebuild) writes hours of event
time within seconds, so a TTL fixed on the wall clock would keep every bucket of the
backlog, and one computed from the wall clock's ``now`` would expire an old backlog at
once. Here the key of bucket ``b`` gets ``TTL = (b + 1) * 60 s + 3660 s - clock``, where
``clock`` is the newest ``ts`` this consumer has seen: the seed's 3660 s after the
bucket's last possible write, counted on the consumer's event clock. Live, ``clock`` is
about now and a current bucket gets the seed's 3660 s (plus what is left of its minute);
in a replay each bucket gets the wall-clock seconds it would have left live, so a
replayed backlog keeps its window and its TTLs keep running (in wall-clock seconds,
from the moment of the write). At least 1 s: an event more than an hour behind the clock
lies before the window anyway.

**No watermark.** The baseline has no watermark: its window is the 60 buckets ending at
the bucket of ``now`` (wall time, live; :class:`BaselineReader` takes the time from a
``now_ms`` function, and the benchmark passes the consumer's clock, or the flow's
published window to compare counts). The consumer writes, in the same pipeline after
each batch's increments, its positions (``{prefix}:positions``, partition -> next offset)
and its clock (``{prefix}:clock``): a reader that sees a position sees every increment
before it. The benchmark measures freshness with them.

Keys (the seed's, behind a prefix so it can share a Redis; ``{ws}`` keeps a workspace's
buckets in one Redis Cluster slot, as ``ZUNIONSTORE`` needs): ``P:active:{ws}:<bucket>``,
``P:active:{ws}:top`` (the cached union), ``P:positions``, ``P:clock``.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, cast

import orjson
import redis
from confluent_kafka import Consumer, KafkaError, TopicPartition

from rankflow.connectors.kafka import topic_partitions
from rankflow.connectors.redis_replies import Hash
from rankflow.state.message_events import parse_message_records

BATCH = 500  # messages per pipelined round trip (the listener and boards baselines' choice)
BUCKET_MS = 60_000
WINDOW_BUCKETS = 60
TTL_S = 3660  # the seed's EXPIRE
CACHE_MS = 5000  # the seed's result cache
EXPIRE_MODES = ("per-message", "per-batch")

READ_LUA = """
-- KEYS[1]: the cached union; KEYS[2..]: the window's bucket keys
-- ARGV: cache ms, query ('top' or 'channel'), k, channel
if redis.call('EXISTS', KEYS[1]) == 0 and #KEYS > 1 then
  redis.call('ZUNIONSTORE', KEYS[1], #KEYS - 1, unpack(KEYS, 2))
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
if ARGV[2] == 'top' then
  return redis.call('ZREVRANGE', KEYS[1], 0, tonumber(ARGV[3]) - 1, 'WITHSCORES')
end
local count = redis.call('ZSCORE', KEYS[1], ARGV[4])
if not count then
  return false
end
return {count, redis.call('ZREVRANK', KEYS[1], ARGV[4])}
"""
"""The seed's read path in one round trip: refresh the union when the cache has expired
(``ZUNIONSTORE`` + ``PEXPIRE``), then ``ZREVRANGE`` (top) or ``ZSCORE`` + ``ZREVRANK``
(channel). An empty union leaves no key, so a workspace without counts is unioned at every
read (there is nothing to union)."""


class BaselineKeys:
    """Key names under a prefix."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.positions = f"{prefix}:positions"
        self.clock = f"{prefix}:clock"

    def bucket(self, workspace: str, b: int) -> str:
        return f"{self.prefix}:active:{{{workspace}}}:{b}"

    def top(self, workspace: str) -> str:
        return f"{self.prefix}:active:{{{workspace}}}:top"

    def window(self, workspace: str, last_bucket: int, n: int = WINDOW_BUCKETS) -> list[str]:
        return [self.bucket(workspace, b) for b in range(last_bucket - n + 1, last_bucket + 1)]


def ttl_seconds(b: int, clock: int, bucket_ms: int = BUCKET_MS, ttl_s: int = TTL_S) -> int:
    """The TTL of bucket ``b``'s key when the consumer's newest ``ts`` is ``clock``: the seed's
    ``ttl_s`` after the bucket's last possible write, on the event clock (at least 1 s).

    >>> ttl_seconds(10, 10 * 60_000 + 1_000)  # live: written a second into its minute
    3719
    >>> ttl_seconds(10, 10 * 60_000 + 3_000_000)  # replayed, 50 minutes behind the clock
    720
    >>> ttl_seconds(10, 20 * 60_000 * 60)
    1
    """
    return max(1, -(-((b + 1) * bucket_ms + ttl_s * 1000 - clock) // 1000))


class ActivityBaseline:
    """Applies message records to Redis the seed's way, a pipelined batch at a time."""

    def __init__(self, redis_url: str, prefix: str, *, expire: str = "per-message", bucket_ms: int = BUCKET_MS,
                 ttl_s: int = TTL_S) -> None:
        if expire not in EXPIRE_MODES:
            raise ValueError(f"expire must be one of {EXPIRE_MODES}, got {expire!r}")
        self.client = redis.Redis.from_url(redis_url)
        self.keys = BaselineKeys(prefix)
        self.expire, self.bucket_ms, self.ttl_s = expire, bucket_ms, ttl_s
        self.clock = -1  # the newest valid ts seen
        self.positions: dict[str, int] = {}
        self.stats = {"events": 0, "counted": 0, "invalid": 0}

    def apply(self, batches: Iterable[tuple[str, list[int], list[bytes]]]) -> None:
        """Apply ``(partition name, offsets, records)`` batches in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        zincrby, expire = pipe.zincrby, pipe.expire
        bucket_key, bucket_ms, ttl_s = self.keys.bucket, self.bucket_ms, self.ttl_s
        per_message = self.expire == "per-message"
        last_ttl: dict[str, int] = {}  # per-batch: each key's TTL, sent once after its increments
        events_n = counted = invalid = 0
        for partition, offsets, records in batches:
            events, dead = parse_message_records(records, offsets, partition, 0)
            events_n += len(records)
            invalid += len(dead)
            counted += len(events)
            clock = self.clock
            for ws, ch, _user, ts, _offset, _raw in events:
                if ts > clock:
                    clock = ts
                b = ts // bucket_ms
                key = bucket_key(ws, b)
                zincrby(key, 1, ch)
                ttl = max(1, -(-((b + 1) * bucket_ms + ttl_s * 1000 - clock) // 1000))
                if per_message:
                    expire(key, ttl)
                else:
                    last_ttl[key] = ttl
            self.clock = clock
            if offsets:
                self.positions[partition] = offsets[-1] + 1
        for key, ttl in last_ttl.items():
            expire(key, ttl)
        if self.positions:
            # redis-py hints `mapping` as a Mapping keyed by its union of key types, and a
            # Mapping is invariant in its keys: a dict[str, int] does not fit the hint
            pipe.hset(self.keys.positions, mapping=self.positions)  # type: ignore[arg-type]
        if self.clock >= 0:
            pipe.set(self.keys.clock, self.clock)
        pipe.execute()
        self.stats["events"] += events_n
        self.stats["counted"] += counted
        self.stats["invalid"] += invalid

    def consume(self, bootstrap: str, topic: str, batch: int = BATCH, *, follow: bool = False,
                stop: threading.Event | None = None) -> dict[str, Any]:
        """Apply the topic from its start: up to the end each partition has when it reaches it,
        or (``follow``) until ``stop`` is set."""
        parts = topic_partitions(bootstrap, topic)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "activity-baseline",
                             "enable.auto.commit": False, "enable.partition.eof": not follow,
                             "fetch.wait.max.ms": 10})
        consumer.assign([TopicPartition(topic, part, 0) for part in parts])
        names = {part: f"{topic}/{part}" for part in parts}
        ended: set[int] = set()
        stop = stop or threading.Event()
        started = time.perf_counter()
        try:
            while (follow or len(ended) < len(parts)) and not stop.is_set():
                by_part: dict[int, tuple[list[int], list[bytes]]] = {}
                for m in consumer.consume(batch, 0.05):
                    err, part = m.error(), m.partition()
                    if err is not None and err.code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(err)
                    assert part is not None  # a message or a partition's end: of a partition
                    if err is not None:
                        ended.add(part)
                        continue
                    offset = m.offset()
                    assert offset is not None  # a message's
                    got = by_part.get(part)
                    if got is None:
                        got = by_part[part] = ([], [])
                    got[0].append(offset)
                    got[1].append(m.value() or b"")
                if by_part:
                    self.apply((names[p], offsets, records) for p, (offsets, records) in by_part.items())
        finally:
            consumer.close()
        seconds = time.perf_counter() - started
        return {**self.stats, "clock": self.clock, "seconds": seconds,
                "events_per_s": self.stats["events"] / max(seconds, 1e-9)}

    def close(self) -> None:
        self.client.close()


def run_activity_baseline(bootstrap: str, topic: str, redis_url: str, prefix: str, *, batch: int = BATCH,
                          expire: str = "per-message", follow: bool = False,
                          stop: threading.Event | None = None) -> dict[str, Any]:
    """The seed's ingest over the whole topic (or following it until ``stop``): events,
    counted, invalid, clock, seconds, events_per_s."""
    baseline = ActivityBaseline(redis_url, prefix, expire=expire)
    try:
        return baseline.consume(bootstrap, topic, batch, follow=follow, stop=stop)
    finally:
        baseline.close()


class BaselineReader:
    """The seed's read path: a workspace's top K and a channel's count and rank from the union
    of the window's buckets, cached ``cache_ms``.

    ``now_ms`` gives the time whose bucket ends the window: wall time by default (live);
    the benchmark passes the consumer's clock (:func:`read_clock`) for a replayed backlog.
    """

    def __init__(self, client: redis.Redis, prefix: str, *, now_ms: Callable[[], int] | None = None,
                 bucket_ms: int = BUCKET_MS, window_buckets: int = WINDOW_BUCKETS, cache_ms: int = CACHE_MS) -> None:
        self.client, self.keys = client, BaselineKeys(prefix)
        self.now_ms = now_ms or (lambda: int(time.time() * 1000))
        self.bucket_ms, self.n, self.cache_ms = bucket_ms, window_buckets, cache_ms
        self._script = client.register_script(READ_LUA)

    def _keys(self, workspace: str) -> list[str]:
        return [self.keys.top(workspace), *self.keys.window(workspace, self.now_ms() // self.bucket_ms, self.n)]

    def top(self, workspace: str, k: int) -> list[tuple[str, int]]:
        pairs = self._script(keys=self._keys(workspace), args=[self.cache_ms, "top", k, ""])
        return [(pairs[i].decode(), int(float(pairs[i + 1]))) for i in range(0, len(pairs), 2)]

    def channel(self, workspace: str, channel: str) -> tuple[int, int] | None:
        """``(count, rank)`` (rank 1-based), or None when the channel has no count in the window."""
        found = self._script(keys=self._keys(workspace), args=[self.cache_ms, "channel", 0, channel])
        if not found:
            return None
        return int(float(found[0])), int(found[1]) + 1


def read_clock(client: redis.Redis, prefix: str) -> int | None:
    """The consumer's clock: the newest valid ``ts`` it has applied."""
    raw = client.get(BaselineKeys(prefix).clock)
    return None if raw is None else int(raw)


def read_positions(client: redis.Redis, prefix: str) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in cast(Hash, client.hgetall(BaselineKeys(prefix).positions)).items()}


def window_counts(client: redis.Redis, prefix: str, workspace: str, first_bucket: int,
                  last_bucket: int) -> dict[str, int]:
    """A workspace's channel counts summed over buckets ``first_bucket .. last_bucket`` (read
    bucket by bucket, not through the cached union: for comparing counts exactly)."""
    keys = BaselineKeys(prefix)
    pipe = client.pipeline(transaction=False)
    for b in range(first_bucket, last_bucket + 1):
        pipe.zrange(keys.bucket(workspace, b), 0, -1, withscores=True)
    counts: dict[str, int] = {}
    for entries in pipe.execute():
        for channel, score in entries:
            name = channel.decode()
            counts[name] = counts.get(name, 0) + int(score)
    return counts


def main(argv: list[str] | None = None) -> int:
    """Run the baseline as its own process (as the flow runs as its own); stats as JSON on stdout."""
    p = argparse.ArgumentParser(prog="python -m rankflow.bench.activity_baseline")
    p.add_argument("--brokers", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--redis", required=True)
    p.add_argument("--prefix", required=True, help="key prefix, so the baseline can share a Redis")
    p.add_argument("--batch", type=int, default=BATCH, help="messages per round trip (default: %(default)s)")
    p.add_argument("--expire", choices=EXPIRE_MODES, default="per-message",
                   help="an EXPIRE with every ZINCRBY (the seed), or once per key per batch (default: %(default)s)")
    p.add_argument("--follow", action="store_true", help="keep following the topic until SIGINT or SIGTERM")
    a = p.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stats = run_activity_baseline(a.brokers, a.topic, a.redis, a.prefix, batch=a.batch, expire=a.expire,
                                  follow=a.follow, stop=stop)
    sys.stdout.buffer.write(orjson.dumps(stats) + b"\n")
    print(f"{stats['events']} events in {stats['seconds']:.2f}s ({stats['events_per_s']:,.0f}/s), "
          f"{stats['invalid']} invalid", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
