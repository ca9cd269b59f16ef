"""Loading a JSON Lines log into a Kafka topic, keyed by ``user_id`` (or another field).

Every line becomes one message, invalid lines included (the flow must see them to
dead-letter them). The key is the line's key field (``user_id``; ``player_id`` for
score logs) when it has a string one, so all events of a user or player land in one
partition and keep their order; a line without one gets the empty key, which the
default partitioner spreads at random over the partitions (no order kept among those
lines), and is counted: the command says how many, and what to do if that is a mistake. A key field that none of the first lines has (a misspelt ``--key-field``
would put the whole log into one partition) is refused before anything is
produced. The producer uses ``acks=all`` with idempotence, and the command fails
unless every message was acknowledged.
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass
from collections.abc import Callable, Iterable
from itertools import islice
from typing import Any

import orjson
from confluent_kafka import KafkaError

from rankflow.connectors.kafka import KafkaEndpoint, KafkaUnavailable, ensure_topic, reliable_producer
from rankflow.generate import LogGenerator
from rankflow.options import UsageError
from rankflow.progress import reading

MAX_LIVE_WAIT_S = 10.0
""":func:`produce_live`: a line due further ahead than this is a generated invalid one, sent at once."""

KEY_SAMPLE_LINES = 1000
"""How many lines the key field is looked for in before anything is produced."""


def _object(line: bytes) -> dict[str, Any] | None:
    """The line's JSON object, or None for anything else (the flow dead-letters those)."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def field_key(line: bytes, field: str) -> bytes:
    """The line's string ``field`` as a message key, else the empty key (inline, not
    through ``_object``: once per message, the call would cost 15% of the key's time)."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return b""
    value = obj.get(field) if isinstance(obj, dict) else None
    return value.encode() if isinstance(value, str) else b""


def check_key_field(path: str, field: str, sample: int = KEY_SAMPLE_LINES) -> None:
    """Refuse (``UsageError``) a key field that no JSON object of the first ``sample`` lines
    has as a string: it is misspelt, or the log is of another kind, and every message
    would get the empty key. A log without JSON objects there is not judged (its lines
    are invalid events, produced for the flow to dead-letter)."""
    fields: set[str] = set()
    with open(path, "rb") as f:
        lines = 0
        for lines, line in enumerate(islice(f, sample), 1):  # noqa: B007 - the count is read after the loop
            if field_key(line, field):
                return
            fields.update(_object(line) or ())
    if fields:
        shown = ", ".join(sorted(fields)[:12]) + (", ..." if len(fields) > 12 else "")
        raise UsageError(f"--key-field {field}: none of the first {lines} lines of {path} has a string {field!r} "
                         f"(their fields: {shown}); nothing produced")


def user_key(line: bytes) -> bytes:
    return field_key(line, "user_id")


MESSAGE_MAX_BYTES = 1_000_000
"""The producer's ``message.max.bytes`` (librdkafka's default, and a broker's usual limit)."""
RECORD_ROOM = 1024
"""Of a message's bytes, what the key and the record's framing may take: a longer line is refused."""


def check_line_sizes(path: str, limit: int = MESSAGE_MAX_BYTES - RECORD_ROOM) -> None:
    """Refuse a log with a line that cannot be one Kafka message, before anything is produced:
    the producer would fail at that line with the lines before it already sent, and a
    second try after fixing the line would send them twice. One quick pass over the file
    (the produce that follows takes far longer)."""
    with open(path, "rb") as f:
        if max(map(len, f), default=0) <= limit + 1:  # the common case, at the speed of reading: none is
            return
        f.seek(0)
        for n, line in enumerate(f, start=1):
            size = len(line.rstrip(b"\n"))
            if size > limit:
                raise UsageError(f"{path} line {n} is {size:,} bytes: a Kafka message holds at most about "
                                 f"{limit:,} (message.max.bytes {MESSAGE_MAX_BYTES:,}); nothing was produced")


@dataclass
class ProduceResult:
    messages: int
    partitions: int
    unkeyed: int = 0  # messages sent with the empty key: their line had no string key field


def produce_file(path: str, endpoint: KafkaEndpoint, partitions: int, progress: bool = True,
                 key_field: str = "user_id") -> ProduceResult:
    """Produce every line of ``path``; ``progress``: a bar while it runs, where standard error is a
    terminal (``rankflow.progress``)."""
    check_key_field(path, key_field)
    check_line_sizes(path)
    count = ensure_topic(endpoint.brokers, endpoint.topic, partitions, endpoint.settings)
    producer = reliable_producer(endpoint.brokers, endpoint.settings, **{"linger.ms": 20, "batch.num.messages": 10_000,
                                                      "message.max.bytes": MESSAGE_MAX_BYTES})
    errors: list[KafkaError] = []

    def delivered(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    sent = unkeyed = 0
    started = time.perf_counter()
    with open(path, "rb") as f, reading("producing", os.path.getsize(path), enabled=progress) as bar:
        for line in f:
            value = line.rstrip(b"\n")
            key = field_key(value, key_field)
            unkeyed += not key
            while True:
                try:
                    producer.produce(endpoint.topic, key=key, value=value, on_delivery=delivered)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    producer.poll(0.1)
            sent += 1
            if sent % 5000 == 0:
                producer.poll(0)
                if bar is not None:
                    bar(f.tell(), sent, time.perf_counter() - started)
            if errors:
                break
        remaining = producer.flush(120)
        if bar is not None:
            bar(f.tell(), sent, time.perf_counter() - started)
    if errors or remaining:
        raise KafkaUnavailable(endpoint.settings.scrub(
            f"{len(errors) + remaining} messages not acknowledged by {endpoint.brokers}"
            + (f": {errors[0]}" if errors else "")))
    return ProduceResult(sent, count, unkeyed)


def produce_steady(brokers: str, topic: str, rate: int, users: int, songs: int, seed: int,
                   stop: Any = None, count: int = 10**12, sample_every: int = 0) -> dict[tuple[int, int], float]:
    """Produce generated playback events at ``rate`` per second.

    Stops after ``count`` events or when ``stop`` (a threading or multiprocessing
    Event) is set. Keeps the demo and the API benchmark busy, and drives the freshness
    benchmark: with ``sample_every``, returns ``(partition, offset) -> send time`` of
    every n-th event the broker acknowledged.
    """
    producer = reliable_producer(brokers, **{"linger.ms": 2})
    producer.list_topics(topic, timeout=10)  # connect and learn the partitions before the clock starts
    sent: dict[tuple[int, int], float] = {}

    def delivered(err: KafkaError | None, msg: Any, at: float, n: int) -> None:
        if err is None and sample_every and n % sample_every == 0:
            sent[(msg.partition(), msg.offset())] = at

    start = time.perf_counter()
    for n, line in enumerate(LogGenerator(users, songs, seed=seed).lines(count)):
        if stop is not None and stop.is_set():
            break
        delay = start + n / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        at = time.time()
        producer.produce(topic, key=user_key(line), value=line,
                         on_delivery=functools.partial(delivered, at=at, n=n))
        if n % 100 == 0:
            producer.poll(0)
    producer.flush(60)
    return sent


def produce_live(brokers: str, topic: str, lines: Iterable[bytes], key: Callable[[bytes], bytes], time_field: str,
                 stop: Any) -> int:
    """Produce each line when the clock reaches its event time (``time_field``, ms since the
    epoch); a line without one (an invalid line of the log) at once. Stops when ``stop`` (a
    threading Event) is set or the lines end; returns the lines produced.

    Live traffic whose event time is the present: the demo's three generators start ``now``
    and this keeps them there, so a window, a watermark and a snapshot's age read as they
    would on a real stream. A line whose time is already past (late, redelivered) goes out
    at once; the pace is the generator's (its events per second of event time).
    """
    producer = reliable_producer(brokers, **{"linger.ms": 5})
    producer.list_topics(topic, timeout=10)
    sent = 0
    for line in lines:
        try:
            at = orjson.loads(line).get(time_field)
        except (orjson.JSONDecodeError, AttributeError):
            at = None
        wait = at / 1000 - time.time() if isinstance(at, int) and not isinstance(at, bool) else 0.0
        if wait > MAX_LIVE_WAIT_S:  # a line made invalid on purpose (a time out of range): at once
            wait = 0.0
        if (wait > 0 and stop.wait(wait)) or stop.is_set():  # the wait ends at once on stop
            break
        producer.produce(topic, key=key(line), value=line)
        sent += 1
        producer.poll(0)
    producer.flush(60)
    return sent


def append_steady(path: str, rate: int, users: int, songs: int, seed: int, stop: Any = None,
                  count: int = 10**12) -> None:
    """Append generated playback events to a JSON Lines file at ``rate`` per second.

    Traffic for a flow that follows the file (``--input jsonl:PATH`` without
    ``--until-eof``) without a broker: the local test broker costs a core when it is
    consumed live at low rates, which a reader benchmark would measure instead.
    """
    start = time.perf_counter()
    with open(path, "ab", buffering=0) as out:
        pending: list[bytes] = []
        for n, line in enumerate(LogGenerator(users, songs, seed=seed).lines(count)):
            if stop is not None and stop.is_set():
                break
            pending.append(line + b"\n")
            delay = start + (n + 1) / rate - time.perf_counter()
            if delay > 0.005 or len(pending) >= 100:  # whole lines, about every 5 ms
                out.write(b"".join(pending))
                pending.clear()
            if delay > 0:
                time.sleep(delay)
        out.write(b"".join(pending))

