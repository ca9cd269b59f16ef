"""A Redis that stalls or refuses for a while: the publisher waits it out, within bounds.

Each test gets a Redis of its own, so stopping or demoting it disturbs no other test.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis

from rankflow.connectors.redis_generations import join_run
from rankflow.connectors.redis_listeners import CountTable
from rankflow.connectors.redis_publish import Publisher
from rankflow.connectors.redis_read import read_counts, read_latest
from rankflow.generate import generate
from rankflow.execution import explain
from rankflow.options import ServiceError
from rankflow.services import LocalRedis, free_port
from rankflow.state.snapshot import Snapshot, snapshot_id
from tests.events import ranking
from tests.model import model_of_lines, read_lines

RANKFLOW = [sys.executable, "-m", "rankflow.cli"]


@pytest.fixture
def own_redis(tmp_path) -> Iterator[LocalRedis]:
    service = LocalRedis(free_port(), tmp_path / "redis").start()
    yield service
    os.kill(service.pid(), signal.SIGCONT)  # a test that failed while Redis was stopped
    service.stop()


def snap(run: int, epoch: int) -> Snapshot:
    return Snapshot(snapshot_id(run, epoch), run, epoch, {"f": epoch}, 1, 1, 1, 0, 10, [("a", 1)], {}, [], [],
                    {"a": 1}, epoch == 1)


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def demote(client: redis.Redis, stale_data: str) -> None:
    """Make Redis a replica of a master that does not exist: writes answer READONLY,
    and with ``replica-serve-stale-data no`` every command answers MASTERDOWN."""
    client.config_set("replica-serve-stale-data", stale_data)
    client.replicaof("127.0.0.1", free_port())


def promote(client: redis.Redis) -> None:
    client.replicaof("NO", "ONE")
    client.config_set("replica-serve-stale-data", "yes")


def busy(client: redis.Redis, url: str) -> Callable[[], None]:
    """Keep Redis running a script: other clients get BUSY until it is killed."""
    client.config_set("busy-reply-threshold", 100)

    def loop() -> None:
        with redis.Redis.from_url(url) as looping_client, pytest.raises(redis.ResponseError, match="killed"):
            looping_client.eval("while true do end", 0)

    looping = threading.Thread(target=loop)
    looping.start()
    wait_until(lambda: _busy(client), "Redis to be busy")

    def end() -> None:
        client.script_kill()
        looping.join()
    return end


def _busy(client: redis.Redis) -> bool:
    try:
        client.ping()
    except redis.ResponseError as exc:
        return str(exc).startswith("BUSY")
    return False


def start_outage(reply: str, client: redis.Redis, url: str) -> Callable[[], None]:
    """Make Redis answer ``reply`` to the publish script; returns what ends it."""
    if reply == "BUSY":
        return busy(client, url)
    demote(client, "yes" if reply == "READONLY" else "no")
    return lambda: promote(client)


@pytest.mark.redis  # own_redis
@pytest.mark.parametrize("reply", ["READONLY", "MASTERDOWN", "BUSY"])
def test_the_publisher_waits_out_a_redis_that_refuses_for_a_while(own_redis, caplog, reply):
    client = redis.Redis.from_url(own_redis.url)
    token = join_run(client, "ns", uuid.uuid4().hex)[0]
    pub = Publisher(own_redis.url, "ns", token, state=CountTable())
    assert pub.publish(snap(token, 1)) == 1
    end = start_outage(reply, client, own_redis.url)
    outcome: list[int] = []
    publishing = threading.Thread(target=lambda: outcome.append(pub.publish(snap(token, 2))))

    def retries() -> list[str]:
        return [r.getMessage() for r in caplog.records if "retrying snapshot" in r.getMessage()]

    with caplog.at_level(logging.WARNING, logger="rankflow.publisher"):
        publishing.start()
        wait_until(lambda: retries() != [], f"the publisher to meet {reply} and retry", timeout=10)
        end()
        publishing.join(timeout=30)
    assert outcome == [1]
    assert reply in retries()[0]
    assert read_latest(client, "ns")["epoch"] == 2
    pub.close()
    client.close()


@pytest.mark.redis  # own_redis
def test_the_publisher_gives_up_after_its_bound_with_an_error_naming_redis(own_redis):
    client = redis.Redis.from_url(own_redis.url)
    token = join_run(client, "ns", uuid.uuid4().hex)[0]
    pub = Publisher(own_redis.url, "ns", token, retry_for_s=0.5, state=CountTable())
    demote(client, "no")
    with pytest.raises(redis.RedisError) as failed:
        pub.publish(snap(token, 1))
    explained = explain(failed.value)
    assert isinstance(explained, ServiceError)
    assert str(explained).startswith(f"lost Redis: Redis did not accept snapshot {snapshot_id(token, 1)} for 0.5 s")
    assert "MASTERDOWN" in str(explained)
    promote(client)
    pub.close()
    client.close()


@pytest.mark.parametrize("reply", ["LOADING", "BUSY", "MASTERDOWN", "READONLY", "TRYAGAIN", "CLUSTERDOWN"])
def test_transient_replies_mean_lost_redis_to_the_cli(reply):
    """The exceptions redis-py raises for these replies (its own parser builds them)."""
    from redis._parsers.base import BaseParser

    exc = BaseParser.parse_error(f"{reply} the server says wait")
    assert isinstance(explain(exc), ServiceError) and "lost Redis" in str(explain(exc))


@pytest.mark.redis  # own_redis
def test_a_run_outlives_a_stalled_redis(own_redis, tmp_path):
    """Redis stops answering (SIGSTOP) for longer than the socket timeout while the run
    publishes a followed file; the run waits, then catches up with the right counts."""
    source = tmp_path / "all.jsonl"
    generate(users=300, songs=40, events=3_000, seed=8, out=source)
    lines = read_lines(str(source))
    log = tmp_path / "live.jsonl"
    log.write_bytes(b"".join(line + b"\n" for line in lines[:1_000]))
    client = redis.Redis.from_url(own_redis.url)
    stderr = tmp_path / "stderr.txt"
    with stderr.open("w") as err:
        proc = subprocess.Popen([*RANKFLOW, "run", "--input", f"jsonl:{log}", "--redis",
                                 f"{own_redis.url}?socket_timeout=1", "--namespace", "ns", "--barrier-ms", "50",
                                 "--dead-letter", f"jsonl:{tmp_path / 'dead.jsonl'}"],
                                stdout=subprocess.DEVNULL, stderr=err)

    def published(position: int) -> Callable[[], bool]:
        def check() -> bool:
            assert proc.poll() is None, f"the run died: {stderr.read_text()}"
            snapshot = read_latest(client, "ns")
            return snapshot is not None and snapshot["positions"].get(str(log)) == position
        return check

    try:
        wait_until(published(1_000), "the first snapshots")
        os.kill(own_redis.pid(), signal.SIGSTOP)
        try:
            with log.open("ab") as f:
                f.write(b"".join(line + b"\n" for line in lines[1_000:]))
            time.sleep(3)  # three socket timeouts
        finally:
            os.kill(own_redis.pid(), signal.SIGCONT)
        wait_until(published(len(lines)), "the run to catch up after the stall", timeout=60)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    assert proc.returncode == 130, stderr.read_text()
    assert "retrying snapshot" in stderr.read_text(), "the run met the stall"
    model = model_of_lines(lines)
    final = read_latest(client, "ns")
    assert final["positions"] == {str(log): len(lines)}
    assert ranking(final) == model.ranking(100)
    assert read_counts(client, "ns") == model.counts
    client.close()
