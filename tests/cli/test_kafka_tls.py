"""Kafka client settings against a cluster that needs them: the local broker behind TLS
(tests/kafka_tls.py: stunnel4 in front of Tansu, a CA made by openssl).

Every client a command makes must get the settings: the broker's metadata names only the
TLS port, so one that missed them would fail, never quietly read in plaintext. A command
that cannot connect (plaintext against the TLS port, a CA that did not sign the broker's
certificate) ends with one line and exit 1; the subprocesses' timeouts guard against a hang
(the bound itself, METADATA_TIMEOUT_S, is the connector's, docs/operations.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import orjson
import pytest
import redis
from fastapi.testclient import TestClient

from rankflow.api.app import Settings, create_app
from rankflow.connectors.kafka import KafkaEndpoint, ensure_topic
from rankflow.connectors.redis_read import read_latest
from rankflow.kafka_settings import CONFIG_ENV, load
from tests.kafka_tls import TlsBroker, start_tls_broker
from tests.cli.test_cli_mistakes import one_line

pytestmark = pytest.mark.broker  # Tansu started here, behind stunnel, not by the kafka_brokers fixture

RANKFLOW = [sys.executable, "-m", "rankflow.cli"]
HANG_GUARD_S = 120  # far above the bound: reaching it means a hang, not a slow machine


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    broker = start_tls_broker(tmp_path_factory.mktemp("tls"))
    yield broker
    broker.stop()


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(CONFIG_ENV, raising=False)


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != CONFIG_ENV}
    return subprocess.run([*RANKFLOW, *args], capture_output=True, text=True, timeout=HANG_GUARD_S,
                          env={**environ, **(env or {})})


def ranking(redis_url: str, namespace: str) -> tuple[list[tuple[str, int]], int, int]:
    client = redis.Redis.from_url(redis_url)
    try:
        final = read_latest(client, namespace)
    finally:
        client.close()
    assert final is not None
    return [(i["song_id"], i["listeners"]) for i in final["items"]], final["total_listeners"], final["dead_letters"]


def test_produce_run_and_rebuild_through_tls_rank_as_the_file_does(tmp_path, tls, redis_url, namespace, topic):
    """produce (--kafka-config), run (the file from $RANKFLOW_KAFKA_CONFIG, dead letters to a topic
    of the same cluster) and rebuild (-X over the file) through TLS: the same ranking, the same
    dead letters, as the same log read from JSON Lines."""
    log = tmp_path / "events.jsonl"
    assert cli("generate", "--users", "300", "--songs", "40", "--events", "6000", "--seed", "7",
               "--out", str(log)).returncode == 0
    config = tls.config_file(tmp_path, "linger.ms = 10", "fetch.min.bytes=1")
    r = cli("produce", "--input", str(log), "--kafka", f"kafka:{tls.brokers}/{topic}", "--partitions", "3",
            "--no-progress", "--kafka-config", str(config))
    assert r.returncode == 0, r.stderr

    from_file = f"{namespace}-file"
    r = cli("run", "--input", f"jsonl:{log}", "--until-eof", "--redis", redis_url, "--namespace", from_file,
            "--dead-letter", f"jsonl:{tmp_path / 'dead.jsonl'}")
    assert r.returncode == 0, r.stderr
    r = cli("run", "--input", f"kafka:{tls.brokers}/{topic}", "--until-eof", "--redis", redis_url,
            "--namespace", namespace, "--dead-letter", f"kafka:{tls.brokers}/{topic}-dead",
            env={CONFIG_ENV: str(config)})
    assert r.returncode == 0, r.stderr
    expected = ranking(redis_url, from_file)
    assert expected[0] and expected[2] > 0, "a ranking, and invalid events to dead-letter"
    assert ranking(redis_url, namespace) == expected

    wrong_ca = tmp_path / "wrong-ca.properties"
    wrong_ca.write_text(f"security.protocol=SSL\nssl.ca.location={tls.other_ca}\n")
    r = cli("rebuild", "--input", f"kafka:{tls.brokers}/{topic}", "--redis", redis_url, "--namespace", namespace,
            "--dead-letter", f"jsonl:{tmp_path / 'rebuild-dead.jsonl'}",
            "--kafka-config", str(wrong_ca), "-X", f"ssl.ca.location={tls.ca}")  # -X wins over the file
    assert r.returncode == 0, r.stderr
    assert ranking(redis_url, namespace) == expected
    assert len((tmp_path / "rebuild-dead.jsonl").read_bytes().splitlines()) == expected[2]


def test_plaintext_against_the_tls_port_is_one_line(tmp_path, tls, redis_url, namespace, topic):
    log = tmp_path / "e.jsonl"
    log.write_text('{"user_id": "u", "playback_id": "p", "song_id": "s", "type": "START", "version": 1, "ts": 1}\n')
    for args in (["produce", "--input", str(log), "--kafka", f"kafka:{tls.brokers}/{topic}", "--no-progress"],
                 ["run", "--input", f"kafka:{tls.brokers}/{topic}", "--until-eof", "--redis", redis_url,
                  "--namespace", namespace, "--dead-letter", f"jsonl:{tmp_path / 'dead.jsonl'}"]):
        r = cli(*args)
        line = one_line(r)
        assert r.returncode == 1 and "cannot reach Kafka" in line and "security.protocol=SSL" in line, line
    client = redis.Redis.from_url(redis_url)
    try:
        assert not client.keys(f"{namespace}*"), "nothing claimed in Redis"
    finally:
        client.close()


def test_a_wrong_ca_is_one_line(tmp_path, tls, topic):
    log = tmp_path / "e.jsonl"
    log.write_text('{"user_id": "u"}\n')
    r = cli("produce", "--input", str(log), "--kafka", f"kafka:{tls.brokers}/{topic}", "--no-progress",
            "-X", "security.protocol=SSL", "-X", f"ssl.ca.location={tls.other_ca}")
    line = one_line(r)
    assert r.returncode == 1 and "certificate verify failed" in line, line


def test_serve_ingest_produces_through_tls(tmp_path, tls, topic):
    """``serve``'s POST /events producer gets the settings its endpoint carries."""
    settings = load(str(tls.config_file(tmp_path)), [], {})
    ensure_topic(tls.brokers, topic, 2, settings)
    app = create_app(Settings(kafka=KafkaEndpoint(tls.brokers, topic, settings), delivery_timeout_ms=10_000))
    event = {"user_id": "u1", "playback_id": "p1", "song_id": "s", "type": "START", "version": 1, "ts": 5}
    with TestClient(app, headers={"Content-Type": "application/json"}) as c:
        r = c.post("/events", content=orjson.dumps([event, {**event, "user_id": "u2"}]))
    assert r.status_code == 202, r.text
    assert all(p["partition"].startswith(f"{topic}/") for p in r.json()["positions"])
