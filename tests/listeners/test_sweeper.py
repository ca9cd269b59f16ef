"""The idle-playback sweeper (docs/semantics/listeners.md 6), live on a real broker and Redis.

Players that stop heart-beating leave the ranking about ``T`` after their last
activity, through ``TIMEOUT`` events the flow writes into its own input; a rebuild of
that input gives the same ranking; a run killed with timers pending times everyone
out after its restart, and duplicate ``TIMEOUT`` events change nothing.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request

import orjson
import pytest

from rankflow.connectors.kafka import ensure_topic, reliable_producer
from rankflow.connectors.redis_read import read_counts, read_latest
from rankflow.services import free_port
from tests.events import ev
from tests.kafka_helpers import read_topic
from tests.model import model_of_lines

RANKFLOW = [sys.executable, "-m", "rankflow.cli"]
T_MS = 3000
T_LONG = 8000  # room for a run's start-up before its players are idle


def now_ms() -> int:
    return int(time.time() * 1000)


def wait_until(predicate, timeout: float = 60.0, what: str = "condition", proc=None) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the run exited ({proc.returncode}) waiting for {what}: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Players:
    """Writes players' events to the topic, keyed by user like the ingest API."""

    def __init__(self, brokers: str, topic: str) -> None:
        self.topic = topic
        self.producer = reliable_producer(brokers)

    def send(self, *events: bytes) -> None:
        for e in events:
            self.producer.produce(self.topic, key=orjson.loads(e)["user_id"].encode(), value=e)
        assert self.producer.flush(30) == 0


def run_command(kafka: str, redis_url: str, namespace: str, tmp_path, *extra: str, t_ms: int = T_MS) -> list[str]:
    return [*RANKFLOW, "run", "--input", kafka, "--redis", redis_url, "--namespace", namespace,
            "--barrier-ms", "100", "--idle-timeout", "1", "--idle-timeout-ms", str(t_ms), "--user-shards", "4",
            "--song-partitions", "2", "--dead-letter", f"jsonl:{tmp_path / 'dead.jsonl'}", *extra]


def rebuild(kafka: str, redis_url: str, namespace: str, tmp_path) -> dict[str, int]:
    r = subprocess.run([*RANKFLOW, "rebuild", "--input", kafka, "--redis", redis_url, "--namespace", namespace,
                        "--barrier-ms", "50", "--dead-letter", f"jsonl:{tmp_path / 'rebuild-dead.jsonl'}"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {name: float(value) for name, _, value in (line.rpartition(" ") for line in text.splitlines())
            if name.startswith(("rankflow_time", 'rankflow_events_total{verdict="timed_out"}'))}


def timeouts(brokers: str, topic: str) -> list[dict]:
    return [e for e in (orjson.loads(v) for _, v in read_topic(brokers, topic)) if e["type"] == "TIMEOUT"]


def interrupt(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_idle_players_are_timed_out_and_a_rebuild_agrees(tmp_path, kafka_brokers, topic, redis_url,
                                                         redis_client, namespace):
    ensure_topic(kafka_brokers, topic, 2)
    kafka = f"kafka:{kafka_brokers}/{topic}"
    players = Players(kafka_brokers, topic)
    users = [f"u{i}" for i in range(10)]
    song = {u: f"s{i % 3}" for i, u in enumerate(users)}
    beating = users[::2]  # the others stop after their START
    port = free_port()
    proc = subprocess.Popen(run_command(kafka, redis_url, namespace, tmp_path, "--metrics-port", str(port)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: read_latest(redis_client, namespace) is not None, what="the first snapshot", proc=proc)
        started = now_ms()
        players.send(*(ev(u, f"{u}-p1", song[u], "START", 1, started) for u in users))
        everyone = {s: sum(1 for u in users if song[u] == s) for s in set(song.values())}
        wait_until(lambda: read_counts(redis_client, namespace) == everyone, what="every START counted", proc=proc)
        expected: dict[str, int] = {}
        for u in beating:
            expected[song[u]] = expected.get(song[u], 0) + 1
        left_at = None
        beat_until = time.monotonic() + (T_MS / 1000) + 8
        while time.monotonic() < beat_until:  # heartbeats every ~second for half of the players
            players.send(*(ev(u, f"{u}-p1", song[u], "HEARTBEAT", 1, now_ms()) for u in beating))
            for _ in range(10):
                if left_at is None and read_counts(redis_client, namespace) == expected:
                    left_at = now_ms()
                time.sleep(0.1)
            assert proc.poll() is None, proc.stderr.read()
        assert left_at is not None, f"idle players never left: {read_counts(redis_client, namespace)}"
        took = left_at - started
        # never before T; "about T plus a barrier" with room for a loaded CI machine (measured ~T + 1.1 s)
        assert T_MS <= took <= T_MS + 10_000, f"the idle players left {took} ms after their last activity"
        assert read_counts(redis_client, namespace) == expected, "heart-beating players stay"
        metrics = scrape(port)
        idle = len(users) - len(beating)
        assert metrics["rankflow_timeouts_fired_total"] >= idle
        assert metrics['rankflow_events_total{verdict="timed_out"}'] == idle
        assert metrics["rankflow_timers_pending"] >= len(beating)  # every counted playback is armed
        assert metrics["rankflow_timer_lag_seconds"] >= 0
        print(f"idle players left {took} ms after their last activity (T = {T_MS} ms); metrics {metrics}")
    finally:
        interrupt(proc)
    fired = timeouts(kafka_brokers, topic)
    assert {e["user_id"] for e in fired} == set(users) - set(beating)
    for e in fired:
        assert e["playback_id"] == f"{e['user_id']}-p1" and e["version"] == 1 and e["song_id"] == song[e["user_id"]]
        assert e["idle_ms"] == T_MS and e["ts"] >= started + T_MS
    live = read_counts(redis_client, namespace)
    assert live == expected
    lines = [v for _, v in read_topic(kafka_brokers, topic)]
    assert model_of_lines(lines).counts == expected
    rebuild(kafka, redis_url, namespace, tmp_path)
    assert read_counts(redis_client, namespace) == live, "a rebuild replays the TIMEOUTs: the same ranking"


def test_timers_survive_kill_9_and_duplicate_timeouts_change_nothing(tmp_path, kafka_brokers, topic, redis_url,
                                                                      redis_client, namespace):
    ensure_topic(kafka_brokers, topic, 2)
    kafka = f"kafka:{kafka_brokers}/{topic}"
    players = Players(kafka_brokers, topic)
    users = [f"v{i}" for i in range(8)]
    recovery = ("--recovery-dir", str(tmp_path / "recovery"))
    # The first execution's T is far off, so no timer can fire before the kill however loaded the
    # machine is; T is not part of the recovery layout, and the restart arms what it restores at T_MS.
    first = run_command(kafka, redis_url, namespace, tmp_path, *recovery, t_ms=600_000)
    command = run_command(kafka, redis_url, namespace, tmp_path, *recovery)
    proc = subprocess.Popen(first, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: read_latest(redis_client, namespace) is not None, what="the first snapshot", proc=proc)
        started = now_ms()
        players.send(*(ev(u, f"{u}-p1", "song", "START", 1, started) for u in users))
        wait_until(lambda: read_counts(redis_client, namespace) == {"song": len(users)}, what="the STARTs",
                   proc=proc)
        counted = read_latest(redis_client, namespace)["snapshot_id"]
        wait_until(lambda: read_latest(redis_client, namespace)["snapshot_id"] >= counted + 2,
                   what="two more barriers: the records reach the recovery store", proc=proc)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert timeouts(kafka_brokers, topic) == [], "killed with every timer pending"
    while now_ms() < started + T_MS:  # every deadline passes while the flow is down
        time.sleep(0.05)
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: read_counts(redis_client, namespace) == {}, what="every idle playback timed out",
                   proc=proc)
        fired = timeouts(kafka_brokers, topic)
        assert {e["user_id"] for e in fired} == set(users)
        players.send(*(orjson.dumps(e) for e in fired))  # a sweeper that wrote them twice
        end = len(read_topic(kafka_brokers, topic))
        wait_until(lambda: sum(read_latest(redis_client, namespace)["positions"].values()) == end,
                   what="the duplicates read", proc=proc)
        time.sleep(0.5)
        assert read_counts(redis_client, namespace) == {}
        again = now_ms()
        players.send(ev("v0", "v0-p2", "other", "START", 2, again))  # a new playback counts again ...
        players.send(*(orjson.dumps(e) for e in fired if e["user_id"] == "v0"))  # ... an old timer never ends it
        wait_until(lambda: read_counts(redis_client, namespace) == {"other": 1}, what="the new playback", proc=proc)
        wait_until(lambda: read_counts(redis_client, namespace) == {}, what="the new playback timed out", proc=proc)
    finally:
        interrupt(proc)
    rebuild(kafka, redis_url, namespace, tmp_path)
    assert read_counts(redis_client, namespace) == {}


@pytest.mark.parametrize("args, message", [
    (["--user-shards", "0"], "needs --user-shards >= 1"),
    (["--until-eof"], "must not write to it"),
    (["--flow", "boards"], "listener flow's sweeper"),
])
def test_sweeper_refusals(tmp_path, kafka_brokers, redis_url, namespace, args, message):
    r = subprocess.run([*RANKFLOW, "run", "--input", f"kafka:{kafka_brokers}/nothing", "--redis", redis_url,
                        "--namespace", namespace, "--idle-timeout-ms", "45000", *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_sweeper_refuses_a_jsonl_input_and_rebuild_has_none(tmp_path, redis_url, namespace):
    log = tmp_path / "events.jsonl"
    log.write_bytes(b"")
    r = subprocess.run([*RANKFLOW, "run", "--input", f"jsonl:{log}", "--redis", redis_url, "--namespace", namespace,
                        "--idle-timeout-ms", "45000"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "needs a Kafka input" in r.stderr, r.stderr
    r = subprocess.run([*RANKFLOW, "rebuild", "--input", f"jsonl:{log}", "--redis", redis_url,
                        "--namespace", namespace, "--idle-timeout-ms", "45000"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "unrecognized arguments: --idle-timeout-ms" in r.stderr, r.stderr


def test_a_backlog_of_heartbeats_times_nobody_out(tmp_path, kafka_brokers, topic, redis_url, redis_client,
                                                 namespace):
    """30 s of retained heartbeats (1 s apart, T = 8 s) read in one go: the sweeper fires
    only for deadlines the input has been processed up to, so nobody is timed out while
    the flow catches up; once the players are idle for T they are."""
    ensure_topic(kafka_brokers, topic, 2)
    kafka = f"kafka:{kafka_brokers}/{topic}"
    players = Players(kafka_brokers, topic)
    users = [f"w{i}" for i in range(6)]
    first = now_ms() - 30_000
    backlog = [ev(u, f"{u}-p1", "song", "START", 1, first) for u in users]
    for t in range(first + 1000, now_ms(), 1000):
        backlog.extend(ev(u, f"{u}-p1", "song", "HEARTBEAT", 1, t) for u in users)
    players.send(*backlog)
    last = max(orjson.loads(e)["ts"] for e in backlog)
    proc = subprocess.Popen(run_command(kafka, redis_url, namespace, tmp_path, "--barrier-ms", "20", t_ms=T_LONG),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: (s := read_latest(redis_client, namespace)) is not None
                   and sum(s["positions"].values()) >= len(backlog), what="the backlog read", proc=proc)
        assert read_counts(redis_client, namespace) == {"song": len(users)}
        assert now_ms() < last + T_LONG, "the test was too slow: the players are idle already"
        assert timeouts(kafka_brokers, topic) == [], "a backlog timed players out"
        wait_until(lambda: read_counts(redis_client, namespace) == {}, what="the idle players timed out",
                   timeout=T_LONG / 1000 + 10, proc=proc)
    finally:
        interrupt(proc)
    assert {e["user_id"] for e in timeouts(kafka_brokers, topic)} == set(users)
    assert all(e["ts"] >= last + T_LONG for e in timeouts(kafka_brokers, topic))
