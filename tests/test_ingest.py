"""POST /events against a real broker: 202 only after acknowledgement, 400 with reasons,
503 when the broker cannot acknowledge, and acknowledged events reach the ranking."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx
import orjson
import pytest
from fastapi.testclient import TestClient

from rankflow.api.app import Settings, create_app
from rankflow.connectors.kafka import KafkaEndpoint, ensure_topic
from rankflow.services import free_port
from tests.events import ranking
from tests.kafka_helpers import read_topic

EVENT = {"user_id": "u1", "playback_id": "p1", "song_id": "song_a", "type": "START", "version": 1, "ts": 5}


@pytest.fixture
def client(kafka_brokers, topic):
    ensure_topic(kafka_brokers, topic, 2)
    app = create_app(Settings(kafka=KafkaEndpoint(kafka_brokers, topic)))
    with TestClient(app) as c:
        yield c


def test_accepted_events_are_in_kafka_keyed_by_user(client, kafka_brokers, topic):
    r = client.post("/events", content=orjson.dumps(EVENT))
    assert r.status_code == 202, r.text
    assert r.json()["accepted"] == 1
    batch = [{**EVENT, "user_id": f"u{i}", "playback_id": f"p{i}", "extra": i} for i in range(50)]
    r = client.post("/events", content=orjson.dumps(batch))
    assert r.status_code == 202 and r.json()["accepted"] == 50
    assert all(p["partition"].startswith(topic + "/") for p in r.json()["positions"])
    messages = read_topic(kafka_brokers, topic)
    assert len(messages) == 51
    for key, value in messages:
        assert orjson.loads(value)["user_id"].encode() == key


def test_invalid_events_are_refused_with_reasons_and_nothing_is_produced(client, kafka_brokers, topic):
    bad = [EVENT, {**EVENT, "type": "PAUSE"}, {**EVENT, "version": -1}, {"user_id": "x"}]
    r = client.post("/events", content=orjson.dumps(bad))
    assert r.status_code == 400
    assert [(p["index"], p["reason"]) for p in r.json()["invalid"]] == [
        (1, "unknown_type"), (2, "out_of_range"), (3, "missing_field")]
    r = client.post("/events", content=b"{nope")
    assert r.status_code == 400 and r.json()["invalid"][0]["reason"] == "invalid_json"
    assert client.post("/events", content=b"[]").status_code == 400
    assert read_topic(kafka_brokers, topic) == []


def test_unreachable_broker_is_a_503():
    app = create_app(Settings(kafka=KafkaEndpoint(f"127.0.0.1:{free_port()}", "t"), delivery_timeout_ms=1000))
    with TestClient(app) as c:
        r = c.post("/events", content=orjson.dumps(EVENT))
    assert r.status_code == 503 and "did not acknowledge" in r.json()["error"]


def test_served_ingest_feeds_the_flow(tmp_path, kafka_brokers, topic, redis_url, namespace):
    ensure_topic(kafka_brokers, topic, 2)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "rankflow.cli", "serve", "--port", str(port),
                               "--kafka", f"{kafka_brokers}/{topic}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}/events"
        deadline = time.monotonic() + 30
        while True:
            try:
                r = httpx.post(url, content=orjson.dumps([
                    EVENT, {**EVENT, "user_id": "u2", "playback_id": "p2"},
                    {**EVENT, "user_id": "u3", "playback_id": "p3", "song_id": "song_b"}]))
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.1)
        assert r.status_code == 202
    finally:
        server.terminate()
        server.wait(timeout=30)
    run = subprocess.run([sys.executable, "-m", "rankflow.cli", "run", "--input", f"kafka:{kafka_brokers}/{topic}",
                          "--until-eof", "--redis", redis_url, "--namespace", namespace,
                          "--dead-letter", f"jsonl:{tmp_path / 'dl.jsonl'}"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    top = subprocess.run([sys.executable, "-m", "rankflow.cli", "top", "--json", "--redis", redis_url,
                          "--namespace", namespace], capture_output=True, text=True)
    assert ranking(orjson.loads(top.stdout)) == [("song_a", 2), ("song_b", 1)]
