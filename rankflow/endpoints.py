"""Endpoint URIs of ``--input`` and ``--dead-letter``: ``kind:target``.

* ``jsonl:PATH`` a JSON Lines file (input: one source partition per file);
* ``kafka:HOST:PORT/TOPIC`` a Kafka topic (input: one source partition per Kafka
  partition), the form of every Kafka address (:func:`rankflow.arg_types.kafka`).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import replace
from typing import Any
from collections.abc import Callable

from bytewax.inputs import FixedPartitionedSource
from bytewax.outputs import Sink

from rankflow.arg_types import KAFKA_FORM, kafka
from rankflow.connectors.jsonl import CHUNK_BYTES, MAX_LINE_BYTES, JsonlDeadLetterSink, JsonlSource
from rankflow.connectors.kafka import BATCH_MESSAGES, KafkaDeadLetterSink, KafkaEndpoint, KafkaSource, KafkaUnavailable
from rankflow.connectors.source_batch import SourceBatch
from rankflow.kafka_settings import NO_SETTINGS, KafkaSettings
from rankflow.options import ServiceError, UsageError, check_input_file, check_output_file

ENDPOINT_KINDS = f"use jsonl:PATH or {KAFKA_FORM}"


def split_endpoint(uri: str, option: str) -> tuple[str, str]:
    kind, sep, rest = uri.partition(":")
    if not sep or not rest:
        raise UsageError(f"{option} must look like KIND:TARGET (e.g. jsonl:events.jsonl), got {uri!r}")
    return kind, rest


def check_input(uri: str) -> tuple[str, str]:
    """``--input``'s kind and target, once the target is usable: a readable file, or a topic address."""
    return _check_endpoint(uri, "--input", "input", check_input_file)


def check_dead_letter(uri: str) -> tuple[str, str]:
    """``--dead-letter``'s kind and target, once the target is usable: a file that can be
    written, or a topic address (whether the broker answers is known when the sink is made)."""
    return _check_endpoint(uri, "--dead-letter", "dead-letter", check_output_file)


def dead_letter_place(uri: str) -> str:
    """Where ``--dead-letter`` writes, as another process can find it: a file's absolute path (a run
    records it for ``rankflow status``, which may run in another folder), a topic as given."""
    kind, target = split_endpoint(uri, "--dead-letter")
    return f"jsonl:{os.path.abspath(target)}" if kind == "jsonl" else uri


def _check_endpoint(uri: str, option: str, what: str, check_file: Callable[[str, str], None]) -> tuple[str, str]:
    kind, target = split_endpoint(uri, option)
    if kind == "jsonl":
        check_file(target, option)
    elif kind == "kafka":
        _kafka_endpoint(target, option)
    else:
        raise UsageError(f"unknown {what} kind {kind!r}: {ENDPOINT_KINDS}")
    return kind, target


def check_endpoints(input_uri: str, dead_letter_uri: str) -> None:
    """Both endpoints of a run are usable, and the dead letters would not overwrite the input.

    A run or a rebuild checks this before it touches Redis: a mistaken second command on
    a namespace must fail on its own, not after claiming the namespace from a healthy run.
    """
    kind, target = check_input(input_uri)
    dead_kind, dead_target = check_dead_letter(dead_letter_uri)
    if kind == dead_kind == "jsonl" and os.path.exists(dead_target) and os.path.samefile(target, dead_target):
        raise UsageError(f"--dead-letter {dead_letter_uri} is the input file: the run would overwrite its input")


def _kafka_endpoint(target: str, option: str, settings: KafkaSettings = NO_SETTINGS) -> KafkaEndpoint:
    """The topic of ``kafka:TARGET`` (:func:`rankflow.arg_types.kafka`) reached with ``settings``, or a
    one-line usage error naming ``option``."""
    try:
        return replace(kafka(f"kafka:{target}"), settings=settings)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"{option}: {exc}") from None


def make_source(uri: str, follow: bool, chunk_bytes: int = CHUNK_BYTES, whole_history: bool = False,
                max_line_bytes: int = MAX_LINE_BYTES, read_batch: int = BATCH_MESSAGES,
                kafka_settings: KafkaSettings = NO_SETTINGS) -> FixedPartitionedSource[SourceBatch, Any]:
    """The input's source. ``whole_history``: a fresh Kafka partition must still start at
    offset 0 (a rebuild from the beginning refuses a log that retention cut). ``max_line_bytes``
    caps a JSON Lines line (a Kafka message is capped by the broker). ``read_batch``: the most
    messages a Kafka partition reads at once. ``kafka_settings``: the user's client settings."""
    kind, target = check_input(uri)
    if kind == "jsonl":
        return JsonlSource([target], follow=follow, chunk_bytes=chunk_bytes, max_line_bytes=max_line_bytes)
    try:
        return KafkaSource(_kafka_endpoint(target, "--input", kafka_settings), until_eof=not follow, whole_history=whole_history,
                           batch=read_batch)
    except KafkaUnavailable as exc:
        raise ServiceError(str(exc)) from None


def input_identity(uri: str) -> dict[str, Any]:
    """What recovery state is keyed by: the topic, or the files as given.

    Not the brokers: the same topic may be reached through other addresses.
    """
    kind, target = split_endpoint(uri, "--input")
    if kind == "kafka":
        return {"kafka_topic": _kafka_endpoint(target, "--input").topic}
    return {"jsonl_files": [target]}


def make_dead_letter_sink(uri: str, kafka_settings: KafkaSettings = NO_SETTINGS) -> Sink:
    kind, target = check_dead_letter(uri)
    if kind == "jsonl":
        return JsonlDeadLetterSink(target)
    try:
        return KafkaDeadLetterSink(_kafka_endpoint(target, "--dead-letter", kafka_settings))
    except KafkaUnavailable as exc:
        raise ServiceError(str(exc)) from None
