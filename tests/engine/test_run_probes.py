"""``GET /livez`` and ``GET /readyz`` on a run's metrics port: ready once the run caught up
with its input the first time (``operators.catch_up``), a live run that follows a JSON Lines
file or a Kafka topic."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import redis

from rankflow.connectors.kafka import ensure_topic, reliable_producer
from rankflow.connectors.redis_read import read_latest
from rankflow.generate import generate
from rankflow.operators.catch_up import CatchUp
from rankflow.services import LocalRedis, free_port
from tests.events import ev
from tests.model import read_lines

pytestmark = pytest.mark.redis  # own_redis


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[LocalRedis]:
    service = LocalRedis(free_port(), tmp_path / "redis").start()
    yield service
    service.stop()


def probe(port: int, path: str) -> httpx.Response | None:
    try:
        return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=5)
    except httpx.TransportError:  # not listening yet
        return None


def wait_for(port: int, path: str, done: Callable[[httpx.Response], bool], proc: subprocess.Popen,
             what: str, timeout: float = 60) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while True:
        answer = probe(port, path)
        if answer is not None and done(answer):
            return answer
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else proc.returncode
        assert time.monotonic() < deadline, f"{what}: {answer and (answer.status_code, answer.text)}"
        time.sleep(0.02)


def start_run(tmp_path: Path, url: str, source: str, port: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rankflow.cli", "run", "--input", source, "--redis", url,
                             "--namespace", "probes", "--barrier-ms", "50", "--metrics-port", str(port),
                             "--dead-letter", f"jsonl:{tmp_path / 'dl.jsonl'}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    proc.wait(timeout=30)


def test_a_followed_file_is_ready_once_a_snapshot_holds_what_it_had_at_start(own_redis, tmp_path):
    log = tmp_path / "events.jsonl"
    generate(users=200, songs=30, events=5_000, seed=3, out=log)
    lines = len(read_lines(str(log)))
    client = redis.Redis.from_url(own_redis.url)
    client.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")  # the run cannot claim its namespace yet
    port = free_port()
    proc = start_run(tmp_path, own_redis.url, f"jsonl:{log}", port)
    try:
        wait_for(port, "/livez", lambda r: r.status_code == 200, proc, "the metrics port answers")
        before = probe(port, "/readyz")
        assert before is not None and before.status_code == 503, before and before.text
        assert before.json() == {"status": "not ready", "reason": "the run has not started reading its input"}
        client.execute_command("CLIENT", "UNPAUSE")
        ready = wait_for(port, "/readyz", lambda r: r.status_code != 503 or "reason" not in r.json(), proc,
                         "ready once caught up")
        assert ready.status_code == 200 and ready.json()["status"] == "ready", ready.text
        assert read_latest(client, "probes")["positions"] == {str(log): lines}, "a snapshot of all it had at start"
        with log.open("ab") as f:  # the input grows: the run caught up once, it stays ready
            f.write(b"".join(ev(f"late{i}", f"p{i}", "s1", "START", 1) + b"\n" for i in range(50)))
        assert probe(port, "/readyz").status_code == 200
        assert probe(port, "/livez").json() == {"status": "live"}
        assert "rankflow_input_records_total" in probe(port, "/metrics").text, "every other path: the metrics"
    finally:
        client.execute_command("CLIENT", "UNPAUSE")
        stop(proc)
        client.close()


@pytest.mark.broker
def test_a_kafka_topic_is_ready_once_every_partition_is_in_a_snapshot(own_redis, kafka_brokers, topic, tmp_path):
    """A backlog produced in batches on two of three partitions (the third is empty: it learns its end
    from the end-of-partition marker)."""
    ensure_topic(kafka_brokers, topic, 3)
    producer = reliable_producer(kafka_brokers)
    sent = {0: 0, 1: 0}
    for i in range(3_000):
        partition = i % 2
        producer.produce(topic, value=ev(f"u{i}", f"p{i}", f"s{i % 40}", "START", 1), partition=partition)
        sent[partition] += 1
    assert producer.flush(30) == 0
    client = redis.Redis.from_url(own_redis.url)
    port = free_port()
    proc = start_run(tmp_path, own_redis.url, f"kafka:{kafka_brokers}/{topic}", port)
    try:
        assert wait_for(port, "/livez", lambda r: True, proc, "the metrics port answers").status_code == 200
        ready = wait_for(port, "/readyz", lambda r: r.status_code == 200, proc, "ready once caught up")
        assert ready.json()["status"] == "ready"
        positions = read_latest(client, "probes")["positions"]
        assert positions == {f"{topic}/0": sent[0], f"{topic}/1": sent[1], f"{topic}/2": 0}
    finally:
        stop(proc)
        client.close()


def test_the_reason_names_the_lag_of_the_last_snapshot():
    """The verdict itself (what a run whose publisher stays behind answers): the snapshot's lag
    behind the end each partition had at start, per partition."""
    catch_up = CatchUp()
    catch_up.reset(whole_input=True)
    catch_up.listed_parts(["t/0", "t/1"])
    for part, end in (("t/0", 100), ("t/1", 40)):
        catch_up.built_part(part)
        catch_up.end_seen(part, end)
    assert catch_up.verdict()[1]["reason"] == "no snapshot stored yet (140 records behind)"
    catch_up.stored({"t/0": 70, "t/1": 40})
    ready, body = catch_up.verdict()
    assert not ready and body == {
        "status": "not ready", "lag": 30,
        "reason": "catching up: the last stored snapshot is behind the end the input had at start (30 records behind)",
        "partitions": [{"partition": "t/0", "position": 70, "end": 100, "lag": 30},
                       {"partition": "t/1", "position": 40, "end": 40, "lag": 0}]}
    catch_up.stored({"t/0": 100, "t/1": 40})
    assert catch_up.verdict()[0]
    catch_up.stored({"t/0": 100, "t/1": 40})
    assert catch_up.verdict()[0], "once caught up, ready"


def test_a_process_of_several_answers_for_the_partitions_it_reads():
    catch_up = CatchUp()
    catch_up.reset(whole_input=False)
    catch_up.listed_parts(["t/0", "t/1"])
    assert catch_up.verdict()[1]["reason"] == "this process reads no partition of the input"
    catch_up.built_part("t/1")
    catch_up.end_seen("t/1", 10)
    assert not catch_up.read_to("t/1", 4)
    assert catch_up.verdict()[1]["lag"] == 6
    assert catch_up.read_to("t/1", 10)
    assert catch_up.verdict()[0], "the publisher runs in another process"
