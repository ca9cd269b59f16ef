"""``rankflow status`` against a real broker and Redis: caught up, behind, no snapshot, mistakes.

The backlogs are produced in batches (``rankflow produce``): the local broker answers queried
high watermarks wrongly after those, so these tests are what shows that the ends ``status``
reads are right (they are checked against a count of the messages consumed)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from rankflow.connectors.kafka import topic_partitions
from rankflow.generate import generate
from rankflow.generate_scores import generate_scores
from rankflow.options import RunOptions
from rankflow.runner import run

RANKFLOW = [sys.executable, "-m", "rankflow.cli"]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*RANKFLOW, *args], capture_output=True, text=True, timeout=300)


def produce(log: Path, brokers: str, topic: str) -> None:
    r = cli("produce", "--input", str(log), "--kafka", f"kafka:{brokers}/{topic}", "--partitions", "3",
            "--no-progress")
    assert r.returncode == 0, r.stderr


def counted(brokers: str, topic: str) -> dict[str, int]:
    """Each partition's end, counted by consuming it to its end (not by any watermark)."""
    parts = topic_partitions(brokers, topic)
    consumer = Consumer({"bootstrap.servers": brokers, "group.id": "tests", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    ends = {p: 0 for p in parts}
    done: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while len(done) < len(parts):
            assert time.monotonic() < deadline, "topic not read to its end in time"
            for m in consumer.consume(10_000, 0.2):
                err = m.error()
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, err
                    done.add(m.partition())
                else:
                    ends[m.partition()] = m.offset() + 1
    finally:
        consumer.close()
    return {f"{topic}/{p}": n for p, n in ends.items()}


def status(*args: str) -> tuple[int, list[dict], str]:
    r = cli("status", "--json", *args)
    return r.returncode, orjson.loads(r.stdout) if r.stdout else None, r.stderr


def by_partition(view: dict) -> dict[str, tuple[int, int, int]]:
    return {p["partition"]: (p["position"], p["end"], p["lag"]) for p in view["partitions"]}


def test_status_of_a_kafka_run_caught_up_then_behind(tmp_path, kafka_brokers, topic, redis_url, namespace):
    log = tmp_path / "events.jsonl"
    generate(users=300, songs=40, events=9_000, seed=3, out=log)
    produce(log, kafka_brokers, topic)
    final = run(RunOptions(input=f"kafka:{kafka_brokers}/{topic}", until_eof=True, redis_url=redis_url,
                           namespace=namespace, dead_letter=f"jsonl:{tmp_path / 'dead.jsonl'}"))
    assert final is not None
    ends = counted(kafka_brokers, topic)
    assert sum(ends.values()) == 9_000
    where = ("--input", f"kafka:{kafka_brokers}/{topic}", "--redis", redis_url, "--namespace", namespace)

    code, views, err = status(*where)
    assert code == 0, err
    [view] = views
    assert view["product"] == "listeners" and view["namespace"] == namespace
    assert view["caught_up"] is True and view["lag"] == 0 and view["problem"] is None
    assert by_partition(view) == {name: (end, end, 0) for name, end in ends.items()}
    assert {name: position for name, (position, _, _) in by_partition(view).items()} == final["positions"]
    assert view["snapshot"]["snapshot_id"] == final["snapshot_id"] and view["snapshot"]["age_ms"] >= 0
    owner = view["owner"]
    assert owner["token"] == final["run"] and owner["command"] == "run" and owner["run_id"]
    assert owner["host"] == socket.gethostname() and owner["since"] <= final["published_at"]
    assert view["dead_letters"] == final["dead_letters"] > 0
    assert sum(view["dead_letters_by_reason"].values()) == view["dead_letters"]

    table = cli("status", *where)
    assert table.returncode == 0, table.stderr
    assert "listeners in namespace" in table.stdout and "caught up" in table.stdout
    assert f"{topic}/0" in table.stdout and f"run {owner['token']}" in table.stdout
    assert owner["dead_letter"] == f"jsonl:{tmp_path / 'dead.jsonl'}"
    assert f"dead letters in jsonl:{tmp_path / 'dead.jsonl'} on host {owner['host']}" in table.stdout, \
        "the dead letters' count says where they are"

    more = tmp_path / "more.jsonl"
    generate(users=300, songs=40, events=2_500, seed=4, out=more)
    produce(more, kafka_brokers, topic)
    after = counted(kafka_brokers, topic)
    assert sum(after.values()) == 11_500
    code, views, err = status(*where)
    assert code == 1, err
    [view] = views
    assert view["caught_up"] is False
    assert by_partition(view) == {name: (ends[name], end, end - ends[name]) for name, end in after.items()}
    assert view["lag"] == 2_500
    table = cli("status", *where)
    assert table.returncode == 1 and "behind by 2,500 events" in table.stdout


def test_status_of_a_jsonl_run(flow, tmp_path, redis_url, namespace, monkeypatch):
    log = tmp_path / "events.jsonl"
    generate(users=100, songs=20, events=1_000, seed=1, out=log)
    flow.run(str(log), namespace=namespace)
    monkeypatch.chdir(tmp_path)  # the same file by another name: the run named it by its full path
    where = ("--input", "jsonl:events.jsonl", "--redis", redis_url, "--namespace", namespace)
    code, [view], err = status(*where)
    assert code == 0, err
    assert view["partitions"] == [{"partition": "events.jsonl", "position": 1_000, "end": 1_000, "lag": 0}]

    with open(log, "ab") as out:
        out.write(b'{"not": "counted yet"}\n' * 7 + b'{"a partial last line')
    code, [view], err = status(*where)
    assert code == 1
    assert view["partitions"] == [{"partition": "events.jsonl", "position": 1_000, "end": 1_007, "lag": 7}]


def test_every_product_of_a_namespace_against_its_own_input(flow, tmp_path, redis_url, namespace):
    plays, scores = tmp_path / "events.jsonl", tmp_path / "scores.jsonl"
    generate(users=50, songs=10, events=300, seed=1, out=plays)
    generate_scores(200, 2, 400, 1, scores)
    flow.run(str(plays), namespace=namespace)
    boards = run(RunOptions(input=f"jsonl:{scores}", until_eof=True, redis_url=redis_url, namespace=namespace,
                            dead_letter=f"jsonl:{tmp_path / 'score-dead.jsonl'}", flow="boards"))
    assert boards is not None
    code, views, err = status("--input", f"jsonl:{plays}", "--input", f"jsonl:{scores}", "--redis", redis_url,
                              "--namespace", namespace)
    assert code == 0, err
    assert [(v["product"], v["namespace"], v["input"], v["lag"], v["caught_up"]) for v in views] == [
        ("listeners", namespace, f"jsonl:{plays}", 0, True),
        ("boards", f"{namespace}:boards", f"jsonl:{scores}", 0, True)]
    assert views[1]["dead_letters_by_reason"] == boards["dead_letters_by_reason"] and boards["dead_letters"] > 0
    code, views, err = status("--flow", "boards", "--input", f"jsonl:{scores}", "--redis", redis_url,
                              "--namespace", namespace)
    assert code == 0 and [v["product"] for v in views] == ["boards"], err


def test_status_of_an_empty_namespace(tmp_path, redis_url, namespace):
    log = tmp_path / "events.jsonl"
    log.write_bytes(b"{}\n{}\n")
    code, views, err = status("--input", f"jsonl:{log}", "--redis", redis_url, "--namespace", namespace)
    assert (code, views) == (1, [])
    assert [orjson.loads(line) for line in err.strip().splitlines()] == [  # --json: its errors are JSON too
        {"error": f"no snapshot in namespace {namespace!r} (listeners: {namespace}, boards: {namespace}:boards, "
                  f"activity: {namespace}:activity)", "exit": 1}]
    code, [view], err = status("--flow", "boards", "--input", f"jsonl:{log}", "--redis", redis_url,
                               "--namespace", namespace)
    assert code == 1 and "no snapshot" in err
    assert view["snapshot"] is None and view["owner"] is None and view["caught_up"] is False
    assert view["namespace"] == f"{namespace}:boards" and view["lag"] == 2
    table = cli("status", "--input", f"jsonl:{log}", "--redis", redis_url, "--namespace", namespace)
    assert table.returncode == 1 and "no snapshot" in table.stderr


def test_a_product_whose_input_is_not_given_is_not_caught_up(flow, tmp_path, redis_url, namespace):
    log = tmp_path / "events.jsonl"
    generate(users=50, songs=10, events=200, seed=2, out=log)
    flow.run(str(log), namespace=namespace)
    other = tmp_path / "other.jsonl"
    other.write_bytes(b"")
    code, [view], err = status("--input", f"jsonl:{other}", "--redis", redis_url, "--namespace", namespace)
    assert code == 1 and view["caught_up"] is False and view["input"] is None
    assert "which no --input names" in err
    code, [view], err = status("--input", f"jsonl:{other}", "--input", f"jsonl:{log}", "--redis", redis_url,
                               "--namespace", namespace)
    assert code == 0 and view["input"] == f"jsonl:{log}", err


@pytest.mark.parametrize("args", [
    (),
    ("--input", "kafka:127.0.0.1/"),
    ("--input", "jsonl:/no/such/file.jsonl"),
    ("--input", "ftp:x"),
    ("--input", "jsonl:{log}", "--flow", "nope"),
    ("--input", "jsonl:{log}", "--namespace", "a{{b}}"),
    ("--input", "jsonl:{log}", "--redis", "http://127.0.0.1:1"),
    ("--input", "jsonl:{log}", "--jsn"),
])
def test_usage_errors_are_one_line_and_exit_2(tmp_path, args):
    log = tmp_path / "events.jsonl"
    log.write_bytes(b"{}\n")
    # an unreachable Redis and broker: a mistake must be found before either is asked
    r = cli("status", "--redis", "redis://127.0.0.1:1/0", *[a.format(log=log) for a in args])
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert r.stdout == ""


def test_an_unreachable_broker_is_one_line_and_exit_1(tmp_path):
    r = cli("status", "--input", "kafka:127.0.0.1:1/events", "--redis", "redis://127.0.0.1:1/0")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("rankflow: cannot reach Kafka at 127.0.0.1:1: ")
