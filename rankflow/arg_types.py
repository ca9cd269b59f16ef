"""Argument types of the command line: what argparse turns into a one-line refusal.

In a module of their own so that the products (``rankflow.products``) can declare
their options without importing the command line.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rankflow.connectors.kafka import KafkaEndpoint


def positive(text: str) -> int:
    return _integer(text, 1)


def not_negative(text: str) -> int:
    return _integer(text, 0)


def _integer(text: str, least: int, below: str | None = None) -> int:
    """``text`` as an integer of at least ``least``; ``below``: what to say of one less than it."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{below or f'must be >= {least}'}, got {value}")
    return value


def within(least: int, most: int) -> Callable[[str], int]:
    """The argparse type of an integer from ``least`` to ``most``.

    >>> within(0, 3660)("7"), within(0, 3660).__name__
    (7, 'integer 0 to 3660')
    """
    def parse(text: str) -> int:
        value = _integer(text, least, f"must be between {least} and {most}")
        if value > most:
            raise argparse.ArgumentTypeError(f"must be between {least} and {most}, got {value}")
        return value

    parse.__name__ = f"integer {least} to {most}"  # what argparse names in "invalid ... value"
    return parse


def port(text: str) -> int:
    """A TCP port: 1 to 65535 (a server given more would listen elsewhere, or fail deep inside)."""
    value = positive(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be 1 to 65535, got {value}")
    return value


def rate(text: str) -> float:
    """A probability per event: 0 to 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be 0 to 1, got {value}")
    return value


def seconds(text: str) -> float:
    """A duration in seconds, more than 0 (``inf``, ``nan`` and negatives are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be more than 0 and finite, got {text}")
    return value


def interval(text: str) -> float:
    """An interval in seconds, 0 meaning off (``--log-every``); ``inf``, ``nan`` and negatives are refused."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 (off) or more, and finite, got {text}")
    return value


def comma_list(text: str) -> list[str]:
    """``a,b,,c`` -> ``['a', 'b', 'c']``."""
    return [s for s in text.split(",") if s]


KAFKA_FORM = "kafka:HOST:PORT/TOPIC"


def kafka(text: str) -> KafkaEndpoint:
    """A Kafka topic's address, ``kafka:HOST:PORT[,HOST:PORT...]/TOPIC``: the one form of every
    option that names a topic (``run --input``, ``--dead-letter``, ``produce --kafka``, ``serve
    --kafka`` and ``--score-kafka``). The bare ``HOST:PORT/TOPIC`` that ``produce`` and ``serve``
    took before is still taken, so that scripts written for it keep working; a broker host
    named ``kafka`` in it (``kafka:9092/t``) is read as that host, not as the prefix.

    >>> kafka("kafka:127.0.0.1:19092/playback-events")
    KafkaEndpoint(brokers='127.0.0.1:19092', topic='playback-events')
    >>> kafka("127.0.0.1:19092/playback-events") == kafka("kafka:127.0.0.1:19092/playback-events")
    True
    >>> kafka("kafka:9092/t")
    KafkaEndpoint(brokers='kafka:9092', topic='t')
    >>> kafka("127.0.0.1:x/t")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: expected kafka:HOST:PORT/TOPIC, got '127.0.0.1:x/t'
    """
    from rankflow.connectors.kafka import KafkaEndpoint  # bytewax and librdkafka: only when a topic is named

    target = text.removeprefix("kafka:")
    if target != text and ":" not in target.partition("/")[0] and ":" in text.partition("/")[0]:
        target = text  # "kafka:9092/t": the bare form, with a broker host named kafka
    brokers, _, topic = target.rpartition("/")
    if not topic or not brokers or not all(map(_broker, brokers.split(","))):
        raise argparse.ArgumentTypeError(f"expected {KAFKA_FORM}, got {text!r}")
    return KafkaEndpoint(brokers, topic)


def _broker(address: str) -> bool:
    """``HOST:PORT`` with a port of 1 to 65535, or a ``HOST`` alone (librdkafka's default port)."""
    if address.endswith("]") or ":" not in address:  # [::1], or a host without a port
        return bool(address)
    host, _, number = address.rpartition(":")
    return bool(host) and number.isdigit() and 1 <= int(number) <= 65535
