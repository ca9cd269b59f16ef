"""Reading a topic back in tests."""

from __future__ import annotations

from confluent_kafka import Consumer, KafkaError, TopicPartition

from rankflow.connectors.kafka import topic_partitions


def read_topic(brokers: str, topic: str, timeout_s: float = 30.0) -> list[tuple[bytes | None, bytes]]:
    """Every message of every partition, until each partition's end."""
    parts = topic_partitions(brokers, topic)
    consumer = Consumer({"bootstrap.servers": brokers, "group.id": "tests", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    out: list[tuple[bytes | None, bytes]] = []
    done: set[int] = set()
    import time

    deadline = time.monotonic() + timeout_s
    while len(done) < len(parts) and time.monotonic() < deadline:
        for m in consumer.consume(1000, 0.2):
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF:
                    done.add(m.partition())
                    continue
                raise RuntimeError(m.error())
            out.append((m.key(), m.value()))
    consumer.close()
    assert len(done) == len(parts), "topic not read to its end in time"
    return out
