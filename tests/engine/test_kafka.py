"""Kafka in and out against a real broker: produce, run, dead letters, --until-eof."""

from __future__ import annotations

import subprocess
import sys

import orjson

from rankflow.connectors.kafka import PREFETCH_MIN, KafkaEndpoint, KafkaSource, ensure_topic, reliable_producer
from rankflow.generate import generate
from tests.events import ranking
from tests.kafka_helpers import read_topic
from tests.model import model_of_lines, parse, read_lines

RANKFLOW = [sys.executable, "-m", "rankflow.cli"]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*RANKFLOW, *args], capture_output=True, text=True, timeout=300)


def test_produce_then_run_from_kafka(tmp_path, kafka_brokers, topic, redis_url, namespace):
    log = tmp_path / "events.jsonl"
    generate(users=500, songs=60, events=12_000, seed=5, out=log)
    lines = read_lines(str(log))
    model = model_of_lines(lines)

    r = cli("produce", "--input", str(log), "--kafka", f"{kafka_brokers}/{topic}", "--partitions", "3",
            "--no-progress")
    assert r.returncode == 0, r.stderr
    produced = read_topic(kafka_brokers, topic)
    assert len(produced) == len(lines)
    for key, value in produced:
        event = parse(value)
        if event is not None:
            assert key == event["user_id"].encode(), "messages are keyed by user_id"

    dead_topic = topic + "-dead"
    r = cli("run", "--input", f"kafka:{kafka_brokers}/{topic}", "--until-eof", "--redis", redis_url,
            "--namespace", namespace, "--dead-letter", f"kafka:{kafka_brokers}/{dead_topic}",
            "--song-partitions", "4", "--workers", "2")
    assert r.returncode == 0, r.stderr
    final = orjson.loads(cli("top", "--json", "--k", "100", "--redis", redis_url, "--namespace", namespace).stdout)
    assert ranking(final) == model.ranking(100)
    assert final["total_listeners"] == final["counted_users"] == model.counted_users
    assert set(final["positions"]) == {f"{topic}/0", f"{topic}/1", f"{topic}/2"}
    assert sum(final["positions"].values()) == len(lines)

    # batches of 7 messages, partitions interleaved otherwise: the same result
    r = cli("run", "--input", f"kafka:{kafka_brokers}/{topic}", "--until-eof", "--redis", redis_url,
            "--namespace", namespace + "-small", "--dead-letter", f"jsonl:{tmp_path / 'dead-small.jsonl'}",
            "--song-partitions", "4", "--read-batch", "7")
    assert r.returncode == 0, r.stderr
    small = orjson.loads(cli("top", "--json", "--k", "100", "--redis", redis_url,
                             "--namespace", namespace + "-small").stdout)
    assert ranking(small) == ranking(final) and small["positions"] == final["positions"]

    dead = read_topic(kafka_brokers, dead_topic)
    assert len(dead) == model.dead_letters
    letter = orjson.loads(dead[0][1])
    assert {"reason", "detail", "position", "raw"} <= set(letter)
    assert dead[0][0] == f"{letter['position']['partition']}:{letter['position']['offset']}".encode()


def test_ctrl_c_stops_a_kafka_run_cleanly(tmp_path, kafka_brokers, topic, redis_url, redis_client, namespace):
    import signal
    import time

    from rankflow.connectors.kafka import ensure_topic
    from rankflow.connectors.redis_read import read_latest

    ensure_topic(kafka_brokers, topic, 2)
    proc = subprocess.Popen([*RANKFLOW, "run", "--input", f"kafka:{kafka_brokers}/{topic}", "--redis", redis_url,
                             "--namespace", namespace, "--dead-letter", f"jsonl:{tmp_path / 'dl.jsonl'}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while read_latest(redis_client, namespace) is None:
        assert time.monotonic() < deadline and proc.poll() is None, "the run did not start publishing"
        time.sleep(0.05)
    time.sleep(0.5)  # mostly waiting on Kafka inside the source: the hard case
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "interrupted" in err
    assert "panicked" not in err and "Traceback" not in err


def test_clear_errors_for_kafka(kafka_brokers, redis_url, tmp_path):
    dead = f"jsonl:{tmp_path / 'dl.jsonl'}"
    r = cli("run", "--input", f"kafka:{kafka_brokers}/no-such-topic", "--until-eof", "--redis", redis_url,
            "--dead-letter", dead)
    assert r.returncode == 1 and "no-such-topic" in r.stderr
    r = cli("run", "--input", "kafka:127.0.0.1:1/t", "--until-eof", "--redis", redis_url, "--dead-letter", dead)
    assert r.returncode == 1 and "cannot reach Kafka" in r.stderr
    r = cli("run", "--input", "kafka:no-topic-part", "--redis", redis_url)
    assert r.returncode == 2 and "HOST:PORT/TOPIC" in r.stderr
    log = tmp_path / "e.jsonl"
    log.write_text("{}\n")
    r = cli("produce", "--input", str(log), "--kafka", "127.0.0.1:1/t", "--no-progress")
    assert r.returncode == 1 and "cannot reach Kafka" in r.stderr


def test_recent_plays_from_several_partitions(tmp_path, kafka_brokers, topic, redis_url, namespace):
    """Three Kafka partitions read by two workers: the final recent plays are section 7's at the
    final watermark. Every partition ends with the log's greatest ts (heartbeats of many users,
    so each partition gets some), so none is first heard from after W passed its greatest ts:
    the proviso under which final counts do not depend on the interleaving."""
    from tests.events import ev, recent, recent_window

    log = tmp_path / "events.jsonl"
    generate(users=500, songs=60, events=12_000, seed=8, out=log)
    lines = read_lines(str(log))
    top_ts = max(event["ts"] for event in map(parse, lines) if event is not None)
    lines += [ev(f"tail_{i}", "p", "none", "HEARTBEAT", 1, top_ts) for i in range(30)]
    log.write_bytes(b"".join(line + b"\n" for line in lines))
    model = model_of_lines(lines)

    assert cli("produce", "--input", str(log), "--kafka", f"{kafka_brokers}/{topic}", "--partitions", "3",
               "--no-progress").returncode == 0
    r = cli("run", "--input", f"kafka:{kafka_brokers}/{topic}", "--until-eof", "--redis", redis_url,
            "--namespace", namespace, "--dead-letter", f"jsonl:{tmp_path / 'dead.jsonl'}", "--song-partitions", "4",
            "--workers", "2", "--recent-minutes", "1", "--barrier-ms", "20")
    assert r.returncode == 0, r.stderr
    final = orjson.loads(cli("top", "--json", "--k", "100", "--redis", redis_url, "--namespace", namespace).stdout)
    view = orjson.loads(cli("top", "--recent", "--json", "--k", "100", "--redis", redis_url,
                            "--namespace", namespace).stdout)
    assert view["snapshot_id"] == final["snapshot_id"] and sum(view["positions"].values()) == len(lines)
    assert len(view["positions"]) == 3
    assert view["watermark"] == top_ts
    assert recent({"recent": view}) == model.recent_ranking(1, 100, w=top_ts)
    assert recent_window({"recent": view}) == model.recent_window(1, w=top_ts)
    assert len(view["items"]) > 5, "the window holds plays"
    assert ranking(final) == model.ranking(100)


def test_produce_refuses_a_key_field_the_log_does_not_have(tmp_path, kafka_brokers, topic):
    """A misspelt --key-field would send every message with the empty key, into one
    partition: refused before anything is produced (the topic is not even created)."""
    import pytest

    from rankflow.connectors.kafka import KafkaUnavailable, topic_partitions

    log = tmp_path / "events.jsonl"
    generate(users=200, songs=20, events=2_000, seed=3, out=log)
    r = cli("produce", "--input", str(log), "--kafka", f"{kafka_brokers}/{topic}", "--key-field", "nosuchfield",
            "--no-progress")
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "nosuchfield" in r.stderr and "user_id" in r.stderr, r.stderr
    with pytest.raises(KafkaUnavailable, match="no such topic"):
        topic_partitions(kafka_brokers, topic)


def test_produce_counts_the_lines_it_sends_unkeyed(tmp_path, kafka_brokers, topic):
    """Lines without the key field (invalid events the flow must dead-letter) are produced
    with the empty key, and the command says how many."""
    from tests.events import ev

    log = tmp_path / "events.jsonl"
    lines = [ev(f"u{i}", "p1", "song_a", "START", 1) for i in range(50)] + [b"not json", b'{"type": "START"}',
                                                                            b'{"user_id": 7}']
    log.write_bytes(b"".join(line + b"\n" for line in lines))
    r = cli("produce", "--input", str(log), "--kafka", f"{kafka_brokers}/{topic}", "--partitions", "3",
            "--no-progress")
    assert r.returncode == 0, r.stderr
    assert ('3 of 53 lines have no "user_id" field (a string): they were sent without a key, so Kafka spreads them '
            "over the partitions") in r.stderr and "--key-field" in r.stderr, r.stderr
    produced = read_topic(kafka_brokers, topic)
    assert sorted(v for k, v in produced if not k) == sorted(lines[50:]) and len(produced) == 53
    r = cli("produce", "--input", str(log), "--kafka", f"{kafka_brokers}/{topic}", "--no-progress",
            "--key-field", "song_id")
    assert r.returncode == 0 and '3 of 53 lines have no "song_id" field' in r.stderr, r.stderr
    log.write_bytes(b"".join(line + b"\n" for line in lines[:50]))
    r = cli("produce", "--input", str(log), "--kafka", f"{kafka_brokers}/{topic}", "--no-progress")
    assert r.returncode == 0 and "without a key" not in r.stderr, r.stderr


def test_a_partition_larger_than_its_prefetch_is_read_once_to_the_end_seen_at_start(kafka_brokers, topic):
    """The source's consumers fetch one batch ahead (``PREFETCH_MIN``), not the whole partition:
    an until-eof read still takes every offset once and stops at the end its first fetch saw,
    though the log grows meanwhile."""
    ensure_topic(kafka_brokers, topic, 1)
    producer = reliable_producer(kafka_brokers)
    first = 2 * PREFETCH_MIN + 5_000
    for i in range(first):
        producer.produce(topic, value=b"%d" % i)
    assert producer.flush(30) == 0
    source = KafkaSource(KafkaEndpoint(kafka_brokers, topic), until_eof=True, batch=2_000)
    part = source.build_part("in", f"{topic}/0", None)
    offsets: list[int] = []
    grown = False
    try:
        while True:
            try:
                batch = part.read()
            except StopIteration:
                break
            if batch is None:
                continue
            assert len(batch.records) <= 2_000
            offsets.extend(range(batch.start, batch.end))
            assert [int(r) for r in batch.records] == list(range(batch.start, batch.end))
            if not grown:  # the log grows after the first read: the run still ends where it began
                for i in range(first, first + 3_000):
                    producer.produce(topic, value=b"%d" % i)
                assert producer.flush(30) == 0
                grown = True
    finally:
        part.close()
    assert offsets == list(range(first))
