"""``rankflow.produce.produce_live``: the demo's traffic, each line sent when the clock reaches its
event time, keyed as ``rankflow produce`` keys it, invalid lines at once (the flow dead-letters them)."""

from __future__ import annotations

import threading
import time
import uuid

import orjson

from rankflow.connectors.kafka import ensure_topic
from rankflow.produce import field_key, produce_live
from tests.kafka_helpers import read_topic


def test_every_line_goes_out_keyed_none_before_its_time(kafka_brokers):
    topic = f"live-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka_brokers, topic, 2)
    now = int(time.time() * 1000)
    lines = [orjson.dumps({"workspace_id": f"w{i % 3}", "ts": now + 100 * i}) for i in range(5)]
    lines.insert(2, b"not json at all")  # no time: at once
    lines.insert(4, orjson.dumps({"workspace_id": "w0", "ts": now - 60_000}))  # late: at once
    sent: list[float] = []

    def keyed(line: bytes) -> bytes:
        sent.append(time.time())  # the moment each line is handed to the producer
        return field_key(line, "workspace_id")

    assert produce_live(kafka_brokers, topic, lines, keyed, "ts", threading.Event()) == len(lines)
    for line, at in zip(lines, sent):
        due = orjson.loads(line)["ts"] if line.startswith(b"{") else 0
        assert at * 1000 >= due - 1  # never before its event time (ms, rounded down)
    got = read_topic(kafka_brokers, topic)
    assert sorted(value for _, value in got) == sorted(lines)
    assert {key for key, value in got if value.startswith(b"{")} == {b"w0", b"w1", b"w2"}
    assert (b"", b"not json at all") in got


def test_a_stop_ends_the_wait_for_a_line_due_later(kafka_brokers):
    topic = f"live-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka_brokers, topic, 1)
    stop = threading.Event()
    first = orjson.dumps({"ts": int(time.time() * 1000)})
    later = orjson.dumps({"ts": int(time.time() * 1000) + 5_000})  # within the wait produce_live keeps

    def lines():
        yield first
        stop.set()  # Ctrl-C of the demo, while the next line waits for its time
        yield later

    assert produce_live(kafka_brokers, topic, lines(), lambda line: b"", "ts", stop) == 1
    assert [value for _, value in read_topic(kafka_brokers, topic)] == [first]
