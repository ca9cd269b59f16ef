"""Endpoint URIs of ``--input`` and ``--dead-letter``: ``kind:target``.

* ``jsonl:PATH`` a JSON Lines file (input: one source partition per file);
* ``kafka:HOST:PORT/TOPIC`` a Kafka topic (input: one source partition per Kafka
  partition).
"""

from __future__ import annotations

from typing import Any

from bytewax.inputs import Source
from bytewax.outputs import Sink

from rankflow.connectors.jsonl import CHUNK_BYTES, MAX_LINE_BYTES, JsonlDeadLetterSink, JsonlSource
from rankflow.connectors.kafka import KafkaDeadLetterSink, KafkaEndpoint, KafkaSource, KafkaUnavailable
from rankflow.options import ServiceError, UsageError


def split_endpoint(uri: str, option: str) -> tuple[str, str]:
    kind, sep, rest = uri.partition(":")
    if not sep or not rest:
        raise UsageError(f"{option} must look like KIND:TARGET (e.g. jsonl:events.jsonl), got {uri!r}")
    return kind, rest


def make_source(uri: str, follow: bool, chunk_bytes: int = CHUNK_BYTES, whole_history: bool = False,
                max_line_bytes: int = MAX_LINE_BYTES) -> Source:
    """The input's source. ``whole_history``: a fresh Kafka partition must still start at
    offset 0 (a rebuild from the beginning refuses a log that retention cut). ``max_line_bytes``
    caps a JSON Lines line (a Kafka message is capped by the broker)."""
    kind, target = split_endpoint(uri, "--input")
    try:
        if kind == "jsonl":
            return JsonlSource([target], follow=follow, chunk_bytes=chunk_bytes, max_line_bytes=max_line_bytes)
        if kind == "kafka":
            return KafkaSource(KafkaEndpoint.parse(target), until_eof=not follow, whole_history=whole_history)
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None
    except ValueError as exc:
        raise UsageError(f"--input: {exc}") from None
    except KafkaUnavailable as exc:
        raise ServiceError(str(exc)) from None
    raise UsageError(f"unknown input kind {kind!r}: use jsonl:PATH or kafka:HOST:PORT/TOPIC")


def input_identity(uri: str) -> dict[str, Any]:
    """What recovery state is keyed by: the topic, or the files as given.

    Not the brokers: the same topic may be reached through other addresses.
    """
    kind, target = split_endpoint(uri, "--input")
    if kind == "kafka":
        return {"kafka_topic": KafkaEndpoint.parse(target).topic}
    return {"jsonl_files": [target]}


def make_dead_letter_sink(uri: str) -> Sink:
    kind, target = split_endpoint(uri, "--dead-letter")
    try:
        if kind == "jsonl":
            return JsonlDeadLetterSink(target)
        if kind == "kafka":
            return KafkaDeadLetterSink(KafkaEndpoint.parse(target))
    except ValueError as exc:
        raise UsageError(f"--dead-letter: {exc}") from None
    except KafkaUnavailable as exc:
        raise ServiceError(str(exc)) from None
    raise UsageError(f"unknown dead-letter kind {kind!r}: use jsonl:PATH or kafka:HOST:PORT/TOPIC")
