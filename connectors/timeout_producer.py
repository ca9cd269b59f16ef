"""The sweeper's writes: ``TIMEOUT`` events into the flow's own input topic (docs/semantics/listeners.md 6).

One producer per process, made at the first timer that fires (a run without due
timers never connects), with the settings of every other writer of the input
(``connectors.kafka.reliable_producer``: ``acks=all``, idempotent, and the user's client
settings, which the endpoint carries) and the same
default partitioner, so a ``TIMEOUT`` keyed by ``user_id`` lands in the partition of
that user's other events and is applied in arrival order with them. Delivery
reports are served by :meth:`TimeoutProducer.poll` on every call of the user
shards, and everything pending is flushed at the end of the input. A ``TIMEOUT``
that Kafka does not take is written again (the shard arms its playback again from
the delivery report), and after a crash a resumed shard arms every playing record;
a second ``TIMEOUT`` of a closed playback changes nothing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import orjson
from confluent_kafka import Producer

from rankflow.connectors.kafka import KafkaEndpoint, reliable_producer

log = logging.getLogger("rankflow.sweeper")


class TimeoutProducer:
    """Writes ``TIMEOUT`` events to ``endpoint``; one per process (:func:`producer_for`)."""

    def __init__(self, endpoint: KafkaEndpoint) -> None:
        self.endpoint = endpoint
        self._producer: Producer | None = None
        self.failed = 0
        self._lock = threading.Lock()

    def _delivered(self, err: object, _msg: object) -> None:
        if err is not None:
            self.failed += 1
            log.warning("a TIMEOUT was not delivered (it fires again after its idle time): %s", err)

    def send(self, user_id: str, playback_id: str, song_id: str, version: int, ts: int, idle_ms: int,
             on_delivery: Callable[[Any, Any], None] | None = None) -> None:
        """Queue one ``TIMEOUT``; ``on_delivery(err, msg)`` gets its delivery report (the
        sender arms the playback again when ``err`` is set)."""
        if self._producer is None:
            with self._lock:
                if self._producer is None:
                    self._producer = reliable_producer(self.endpoint.brokers, self.endpoint.settings)
        payload = orjson.dumps({"type": "TIMEOUT", "user_id": user_id, "playback_id": playback_id,
                                "song_id": song_id, "version": version, "ts": ts, "idle_ms": idle_ms})
        producer, key = self._producer, user_id.encode()
        assert producer is not None  # made above, once
        while True:
            try:
                producer.produce(self.endpoint.topic, key=key, value=payload, on_delivery=on_delivery or self._delivered)
                break
            except BufferError:  # the local queue is full (a backlog firing many timers): let it drain
                producer.poll(0.1)

    def poll(self) -> None:
        """Serve delivery reports (the user shards call it once per call, not per ``TIMEOUT``)."""
        if self._producer is not None:
            self._producer.poll(0)

    def flush(self, timeout_s: float = 30.0) -> int:
        """Wait for every pending ``TIMEOUT``; the number still undelivered."""
        if self._producer is None:
            return 0
        remaining = self._producer.flush(timeout_s)
        if remaining:
            log.warning("%d TIMEOUT events not acknowledged at the end (they fire again at the next run)", remaining)
        return remaining


_PRODUCERS: dict[KafkaEndpoint, TimeoutProducer] = {}
_LOCK = threading.Lock()


def producer_for(endpoint: KafkaEndpoint) -> TimeoutProducer:
    """This process's producer for ``endpoint`` (shared by its user shards and workers)."""
    with _LOCK:
        p = _PRODUCERS.get(endpoint)
        if p is None:
            p = _PRODUCERS[endpoint] = TimeoutProducer(endpoint)
        return p
