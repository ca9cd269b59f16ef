"""Kafka input, dead-letter output and producer, over confluent-kafka.

Endpoints are written ``kafka:HOST:PORT[,HOST:PORT...]/TOPIC`` (read by ``rankflow.arg_types.kafka``).

**Source.** One source partition per Kafka partition, named ``TOPIC/N``; its offset
is the Kafka offset. Each partition has its own consumer with ``assign()``: no
consumer group and no committed offsets, because positions live in Bytewax's
recovery store together with the state they produced (committing them to Kafka
separately could skip events whose effects were lost with a crash). A fresh run
starts at the beginning of each partition; a resumed run at the offset its last
complete epoch ended on.

**Never a silent jump.** A position outside the partition's log (recovery state
of a deleted and re-created topic, or events removed by retention) stops the run
with :class:`PositionOutOfRange`, naming the partition, the offset and the log's
range: the consumers use ``auto.offset.reset=error``, and a resumed partition is
checked against its log's range at start-up (some brokers answer a fetch beyond
the end with nothing at all rather than an error). A fresh run whose log no longer
starts at 0 starts at the log's start and says so; a rebuild refuses it.

With ``until_eof`` a partition stops at the end it saw when the run started: the
high watermark of its first fetch, or the partition-EOF marker when it was empty.
(A queried high watermark is not used: some Kafka-compatible brokers, Tansu among
them, answer it wrongly after batched produces; the fetch response is right.)

**Client settings.** A user's librdkafka properties (``--kafka-config``, ``-X``:
``rankflow.kafka_settings``) travel with the endpoint (:attr:`KafkaEndpoint.settings`),
and :func:`client_config` merges them into every consumer, producer and admin client
made here, so none is made without them (a TLS cluster's metadata names only TLS
listeners: a client that missed them would fail, not quietly read in plaintext).

**A cluster that cannot be reached** (down, plaintext against a TLS listener, a CA that
does not sign the broker's certificate, credentials it refuses) fails the first request
of a command within :data:`METADATA_TIMEOUT_S`, with the reason librdkafka gave
(``SSL handshake failed: ... certificate verify failed``, ``SASL authentication
error``) in its one line, secrets masked; librdkafka's retries stay in the debug log.

**Dead letters** are produced with ``acks=all`` and idempotence, keyed
``"<partition>:<offset>"`` of the invalid event. The sink flushes when an epoch
closes, so every dead letter of a completed epoch is acknowledged by the broker.
After a crash the resumed epoch may be produced again: at-least-once, and the key
lets a consumer drop repeats.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from bytewax.inputs import FixedPartitionedSource
from bytewax.outputs import FixedPartitionedSink, StatefulSinkPartition
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from rankflow.connectors.source_batch import BarrierPartition, PositionOutOfRange, SourceBatch
from rankflow.kafka_settings import NO_SETTINGS, KafkaSettings
from rankflow.operators.metrics import METRICS
from rankflow.state.events import DeadLetter

log = logging.getLogger("rankflow.kafka")

BATCH_MESSAGES = 30_000
"""The most messages one read of a partition takes (``consume``'s ``num_messages``)
unless the source is given another (``--read-batch``, or the product's own default).
Reading a backlog, batches this large cost the listener and boards flows 10-35% less CPU
than 2,000 (docs/benchmarks.md): every batch pays its way through each step once (the
ticks of every counter partition, one item per key shard, exchanges) whatever its size.
Live, a read takes what arrived since the last one, so batches stay small and freshness
is unchanged."""
METADATA_TIMEOUT_S = 5.0
"""How long a command's first request (the topic's metadata) waits for the brokers: the bound
on how long a command that cannot connect takes to fail (docs/operations.md)."""


class KafkaUnavailable(RuntimeError):
    """The broker cannot be reached or refused a request."""


@dataclass(frozen=True)
class KafkaEndpoint:
    """A topic, and how to reach its cluster: the brokers and the user's client settings
    (compared and hashed with them; never printed: they may hold secrets)."""

    brokers: str
    topic: str
    settings: KafkaSettings = field(default=NO_SETTINGS, repr=False)

    def __str__(self) -> str:
        return f"kafka:{self.brokers}/{self.topic}"


CLIENT_LOG = logging.getLogger("rankflow.kafka.client")


class _ClientLog:
    """librdkafka's own log, through Python logging instead of raw lines on stderr.

    A client that cannot reach its broker logs every reconnect attempt (about a hundred
    lines before a 5 s metadata request gives up): those are kept at debug level, and the
    error they mean reaches the user once, as the command's failure, or, for a client that
    keeps running (a live run's consumer), as one warning per kind of error a minute
    (``error_cb``).
    """

    WARN_EVERY_S = 60.0
    VAGUE = (KafkaError._ALL_BROKERS_DOWN,)  # says that, not why: a cause is any other error

    def __init__(self, settings: KafkaSettings = NO_SETTINGS, warn: bool = True) -> None:
        self._warned: dict[int, float] = {}
        self._settings = settings
        self._warn = warn
        self.cause: str | None = None  # the first error that says why the brokers were not reached
        self.failed: str | None = None  # the last connection failure logged (some are never errors)

    def log(self, level: int, fmt: str, *args: object) -> None:
        """What confluent-kafka calls for each line of librdkafka's log (``logger``)."""
        if args and args[0] == "FAIL":  # ("FAIL", client, "[thrd:...]: broker: why")
            self.failed = self._settings.scrub(str(args[-1]).partition("]: ")[2] or str(args[-1]))
        if self._settings.secrets():
            CLIENT_LOG.debug("%s", self._settings.scrub(fmt % args if args else fmt))
        else:
            CLIENT_LOG.debug(fmt, *args)

    def error(self, err: KafkaError) -> None:
        said = self._settings.scrub(err.str())
        if self.cause is None and err.code() not in self.VAGUE:
            self.cause = said
        now = time.monotonic()
        if self._warn and now - self._warned.get(err.code(), float("-inf")) >= self.WARN_EVERY_S:
            self._warned[err.code()] = now
            CLIENT_LOG.warning("Kafka: %s", said)


def client_config(brokers: str, settings: KafkaSettings = NO_SETTINGS, routed: _ClientLog | None = None, /,
                  **extra: object) -> dict[str, Any]:
    """Every client's configuration: the brokers, librdkafka's log routed as :class:`_ClientLog`
    says (``routed``, else a new one), rankflow's ``extra`` and, over them, the user's ``settings``
    (which may not set what rankflow's guarantees depend on: ``kafka_settings.OWNED``).

    Values of every kind (strings, numbers, the logger, callbacks): confluent-kafka's own
    hints for ``AdminClient`` name only the plain ones, though it takes these too."""
    routed = routed or _ClientLog(settings)
    return {"bootstrap.servers": brokers, "logger": routed, "error_cb": routed.error, **extra, **settings.as_dict()}


def _offset(m: Message) -> int:
    """A consumed message's offset: confluent-kafka says ``int | None``, None only for an
    error event, and :meth:`_KafkaPartition.read` drops those before it reads offsets."""
    offset = m.offset()
    assert offset is not None
    return offset


def admin(brokers: str, settings: KafkaSettings = NO_SETTINGS) -> AdminClient:
    return AdminClient(client_config(brokers, settings))


def _cluster(brokers: str, settings: KafkaSettings) -> tuple[AdminClient, Any]:
    """An admin client and the cluster's metadata (all topics, not ``list_topics(topic=...)``:
    asking for one by name makes brokers with auto-creation create it, turning a typo into an
    empty topic). Failing, :class:`KafkaUnavailable` within :data:`METADATA_TIMEOUT_S`, with
    the cause librdkafka reported (its errors are served by ``poll``, here, not warned of)."""
    routed = _ClientLog(settings, warn=False)
    client = AdminClient(client_config(brokers, settings, routed))
    try:
        return client, client.list_topics(timeout=METADATA_TIMEOUT_S)
    except KafkaException as exc:
        client.poll(0)
        said = exc.args[0].str() if exc.args and isinstance(exc.args[0], KafkaError) else str(exc)
        why = routed.cause or routed.failed
        cause = f" ({why}{_plaintext_hint(why, settings)})" if why else ""
        raise KafkaUnavailable(settings.scrub(f"cannot reach Kafka at {brokers}: {said}{cause}")) from None


def _plaintext_hint(why: str, settings: KafkaSettings) -> str:
    """What a plaintext client hung up on before the first answer most likely met: a TLS listener."""
    protocol = settings.as_dict().get("security.protocol", "plaintext").lower()
    if "APIVERSION_QUERY" in why and "ssl" not in protocol:
        return "; a TLS listener? then set security.protocol=SSL (or SASL_SSL)"
    return ""


def topic_partitions(brokers: str, topic: str, settings: KafkaSettings = NO_SETTINGS) -> list[int]:
    """The topic's partition numbers; raises if the broker or the topic is missing."""
    _, meta = _cluster(brokers, settings)
    t = meta.topics.get(topic)
    if t is None or t.error is not None or not t.partitions:
        reason = t.error if t is not None and t.error is not None else "no such topic"
        raise KafkaUnavailable(f"topic {topic!r} on {brokers}: {reason}")
    return sorted(t.partitions)


def ensure_topic(brokers: str, topic: str, partitions: int, settings: KafkaSettings = NO_SETTINGS) -> int:
    """Create the topic if it does not exist; return its partition count."""
    client, meta = _cluster(brokers, settings)
    if topic in meta.topics and not meta.topics[topic].error:
        return len(meta.topics[topic].partitions)
    future = client.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic]
    try:
        future.result(timeout=METADATA_TIMEOUT_S)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise KafkaUnavailable(settings.scrub(f"cannot create topic {topic!r}: {exc}")) from None
    return len(topic_partitions(brokers, topic, settings))


def reliable_producer(brokers: str, settings: KafkaSettings = NO_SETTINGS, /, **extra: object) -> Producer:
    """A producer that loses nothing it acknowledges: acks=all with idempotence."""
    return Producer(client_config(brokers, settings, None, **{"acks": "all", "enable.idempotence": True, "linger.ms": 5,
                                                        "compression.type": "none", **extra}))


def _consumer(brokers: str, until_eof: bool, settings: KafkaSettings = NO_SETTINGS, /, **extra: object) -> Consumer:
    return Consumer(client_config(brokers, settings, None, **{
        "group.id": "rankflow-unused",  # required by the client; assign() never joins it
        "enable.auto.commit": False,
        "enable.partition.eof": until_eof,
        "auto.offset.reset": "error",  # an offset out of range is an error, never a silent jump
        "fetch.wait.max.ms": 50,
        **extra,
    }))


PREFETCH_MIN = 10_000
"""The fewest messages a partition's consumer keeps fetched ahead (``queued.min.messages``:
its batch, at least this many). librdkafka's default, 100,000 a partition, fetches most of a
backlog's partition at once: the consumer then waits at the log's end, one empty fetch every
``fetch.wait.max.ms``, for as long as the flow takes to work through what it holds, and on the
local broker those empty fetches cost more than the reads (docs/design.md, "The source's
prefetch"). One batch ahead keeps the flow fed and fetches about as the flow reads."""


class _KafkaPartition(BarrierPartition[int]):
    # consume() never blocks (partitions share a thread), so come back soon: the
    # client's fetch queue refills within milliseconds.
    idle_poll = timedelta(milliseconds=2)

    def __init__(self, brokers: str, topic: str, partition: int, resume: int | None, until_eof: bool,
                 whole_history: bool = False, batch: int = BATCH_MESSAGES, settings: KafkaSettings = NO_SETTINGS) -> None:
        super().__init__()
        self._batch = batch
        self._name = f"{topic}/{partition}"
        self._tp = (topic, partition)
        self._next = resume if resume is not None else 0
        self._unstarted = resume is None  # a fresh partition learns where its log starts
        self._whole_history = whole_history
        self._until_eof = until_eof
        self._stop_at: int | None = None
        self._end_seen: int | None = None  # the end of the log at the first fetch (operators.catch_up)
        self._caught_up = False  # read up to it
        # the end-of-partition marker live too: how a partition with nothing to read learns its end
        self._consumer = _consumer(brokers, True, settings, **{"queued.min.messages": max(batch, PREFETCH_MIN)})
        self._consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING if resume is None else resume)])

    def read(self) -> SourceBatch | None:
        if self._stop_at is not None and self._next >= self._stop_at:
            raise StopIteration
        msgs = self._consumer.consume(self._batch, 0.002)  # barely block: other partitions share this thread
        eof_at = None
        if any(m.error() is not None for m in msgs):
            eof_at = self._check_errors(msgs)
            msgs = [m for m in msgs if m.error() is None]
        if self._unstarted:
            first = _offset(msgs[0]) if msgs else eof_at
            if first is not None:
                self._start_at(first)
        stop_at = self._stop_at
        if stop_at is not None and msgs and _offset(msgs[-1]) >= stop_at:
            msgs = [m for m in msgs if _offset(m) < stop_at]
        if self._until_eof and self._stop_at is None and (msgs or eof_at is not None):
            if msgs:
                self._next = _offset(msgs[-1]) + 1
            self._learn_end(eof_at is not None)
        if not msgs:
            if not self._caught_up and eof_at is not None:
                self._catch_up(eof_at)
            return None
        start, last = _offset(msgs[0]), _offset(msgs[-1])
        self._next = last + 1
        if not self._caught_up:
            self._catch_up(eof_at)
        _, high = self._consumer.get_watermark_offsets(TopicPartition(*self._tp), cached=True)
        if high >= 0:
            METRICS.input_lag[self._name] = max(0, high - self._next)
        records = [m.value() or b"" for m in msgs]
        # Offsets are contiguous unless the topic is compacted or transactional.
        offsets = None if last - start + 1 == len(msgs) else [_offset(m) for m in msgs]
        return SourceBatch(self._name, start, self._next, records, offsets)

    def _catch_up(self, eof_at: int | None) -> None:
        """Tell ``operators.catch_up`` the end this partition saw at start (the end-of-partition
        marker, else the high watermark of the first fetch that returned messages: as
        :meth:`_learn_end`, never a queried one) and how far it has read, until it got there."""
        if self._end_seen is None:
            if eof_at is None:
                _, high = self._consumer.get_watermark_offsets(TopicPartition(*self._tp), cached=True)
                if high < self._next:
                    return
                eof_at = high
            self._end_seen = eof_at
            METRICS.catch_up.end_seen(self._name, eof_at)
        self._caught_up = METRICS.catch_up.read_to(self._name, self._next)

    def _start_at(self, first: int) -> None:
        """A fresh partition's first offset: above 0 when retention deleted the log's beginning."""
        self._unstarted = False
        if first > 0 and self._whole_history:
            raise PositionOutOfRange(
                f"kafka {self._name}: the log starts at offset {first}: the events before it were deleted "
                "(retention), so a replay from the beginning would not be exact; rebuild from a backup of "
                "the recovery directory instead (README: Retention)")
        if first > 0:
            log.warning("%s: the log starts at offset %s (earlier events were deleted by retention); "
                        "counting from there", self._name, first)
        self._next = max(self._next, first)

    def _check_errors(self, msgs: list[Message]) -> int | None:
        """The offset of the partition's end if a message says it was reached; other errors stop the run."""
        eof_at = None
        for m in msgs:
            err = m.error()
            if err is None:
                continue
            if err.code() == KafkaError._PARTITION_EOF:
                eof_at = m.offset()
            elif err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                raise PositionOutOfRange(f"kafka {self._name}: offset {self._next} is not in the partition's log "
                                       f"({err.str()}); {OUT_OF_RANGE_ADVICE}")
            else:
                raise KafkaUnavailable(f"reading {self._name}: {err}")
        return eof_at

    def _learn_end(self, at_eof: bool) -> None:
        if at_eof:
            self._stop_at = self._next
            return
        # Only after a fetch returned messages: before that the client may hold the answer of
        # an offset query, which Tansu gets wrong (too low), and stopping there loses events.
        _, high = self._consumer.get_watermark_offsets(TopicPartition(*self._tp), cached=True)
        if high >= self._next:
            self._stop_at = high

    def empty_batch(self) -> SourceBatch:
        return SourceBatch(self._name, self._next, self._next, [], [])

    def position_state(self) -> int:
        return self._next

    def close(self) -> None:
        self._consumer.close()


OUT_OF_RANGE_ADVICE = ("the recovery state belongs to other data (was the topic deleted and re-created, or did "
                       "retention delete the events?): start over with an empty --recovery-dir, or rebuild")


def log_ranges(brokers: str, topic: str, partitions: list[int],
               settings: KafkaSettings = NO_SETTINGS) -> dict[int, tuple[int, int]]:
    """Each partition's ``(first offset, end offset)``, as the broker's fetch answers say.

    Learned by fetching from each log's beginning, not by an offset query: some
    Kafka-compatible brokers (Tansu) answer queried high watermarks wrongly, while
    the watermark carried by a fetch response is right. One consumer for all
    partitions, small fetches: a start-up cost of one round trip, paid on resume only.
    """
    consumer = _consumer(brokers, True, settings, **{"max.partition.fetch.bytes": 65536, "fetch.wait.max.ms": 10})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        answered: set[int] = set()
        deadline = time.monotonic() + 2 * METADATA_TIMEOUT_S
        while len(answered) < len(partitions):
            if time.monotonic() > deadline:
                raise KafkaUnavailable(f"kafka {topic}: no fetch answer for partitions "
                                       f"{sorted(set(partitions) - answered)} within {2 * METADATA_TIMEOUT_S:.0f}s")
            for m in consumer.consume(len(partitions), 0.1):
                err = m.error()
                if err is not None and err.code() != KafkaError._PARTITION_EOF:
                    raise KafkaUnavailable(f"reading {topic}/{m.partition()}: {err}")
                partition = m.partition()
                assert partition is not None  # a message or a partition's end: of a partition
                answered.add(partition)
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), cached=True) for p in partitions}
    finally:
        consumer.close()


class KafkaSource(FixedPartitionedSource[SourceBatch, int]):
    """Every partition of one topic, as ``TOPIC/N`` source partitions.

    ``whole_history``: a fresh partition must start at offset 0 (a rebuild from the
    beginning), else the run fails; without it a fresh run starts at the log's start
    and says so. A resumed partition must resume inside its log, else the run fails.
    ``batch``: the most messages a partition reads at once (:data:`BATCH_MESSAGES`).
    """

    def __init__(self, endpoint: KafkaEndpoint, until_eof: bool, whole_history: bool = False,
                 batch: int = BATCH_MESSAGES) -> None:
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        self._endpoint = endpoint
        self._batch = batch
        self._until_eof = until_eof
        self._whole_history = whole_history
        self._numbers = topic_partitions(endpoint.brokers, endpoint.topic, endpoint.settings)
        self._parts = [f"{endpoint.topic}/{p}" for p in self._numbers]
        self._ranges: dict[int, tuple[int, int]] | None = None
        self._lock = threading.Lock()

    def list_parts(self) -> list[str]:
        METRICS.catch_up.listed_parts(self._parts)
        return self._parts

    def build_part(self, step_id: str, for_part: str, resume_state: int | None) -> _KafkaPartition:
        METRICS.catch_up.built_part(for_part)
        topic, _, number = for_part.rpartition("/")
        if topic != self._endpoint.topic:
            raise ValueError(f"recovery state is for topic {topic!r}, this run reads {self._endpoint.topic!r}")
        if resume_state is not None:
            self._check_resume(int(number), resume_state)
            log.info("%s: resuming at offset %s", for_part, resume_state)
        return _KafkaPartition(self._endpoint.brokers, topic, int(number), resume_state, self._until_eof,
                               self._whole_history, self._batch, self._endpoint.settings)

    def _check_resume(self, partition: int, offset: int) -> None:
        with self._lock:
            if self._ranges is None:
                self._ranges = log_ranges(self._endpoint.brokers, self._endpoint.topic, self._numbers,
                                          self._endpoint.settings)
        low, high = self._ranges[partition]
        if offset > high or (low >= 0 and offset < low):
            raise PositionOutOfRange(
                f"kafka {self._endpoint.topic}/{partition}: the recovery state resumes at offset {offset}, but the "
                f"partition's log holds offsets {low} to {high - 1} (end {high}); {OUT_OF_RANGE_ADVICE}")


class _DeadLetterProducer(StatefulSinkPartition[DeadLetter, None]):
    def __init__(self, endpoint: KafkaEndpoint) -> None:
        self._topic = endpoint.topic
        self._producer = reliable_producer(endpoint.brokers, endpoint.settings)
        self._failed: list[str] = []

    def _delivered(self, err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            self._failed.append(str(err))

    def write_batch(self, values: list[DeadLetter]) -> None:
        for d in values:
            self._producer.produce(self._topic, key=f"{d.partition}:{d.offset}", value=d.to_json(),
                                   on_delivery=self._delivered)
            self._producer.poll(0)

    def snapshot(self) -> None:
        remaining = self._producer.flush(60)
        if remaining or self._failed:
            raise KafkaUnavailable(
                f"dead letters not acknowledged by Kafka ({remaining} pending, errors: {self._failed[:3]})")

    def close(self) -> None:
        self.snapshot()


class KafkaDeadLetterSink(FixedPartitionedSink[DeadLetter, None]):
    """Dead letters to a Kafka topic (created with one partition if missing)."""

    def __init__(self, endpoint: KafkaEndpoint) -> None:
        self._endpoint = endpoint
        ensure_topic(endpoint.brokers, endpoint.topic, 1, endpoint.settings)

    def list_parts(self) -> list[str]:
        return ["dead-letters"]

    def part_fn(self, item_key: str) -> int:
        return 0

    def build_part(self, step_id: str, for_part: str, resume_state: None) -> _DeadLetterProducer:
        return _DeadLetterProducer(self._endpoint)
