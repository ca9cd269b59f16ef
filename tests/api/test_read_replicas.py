"""Readers on Redis replicas (``--redis-read``): ``rankflow serve`` and the reader commands read
a real replica (``redis-server --replicaof``) of the primary the flows publish to.

The replica follows the primary through a relay the test can pause (:class:`LinkProxy`): while
paused the replica's link lags, it still answers, and what it answers is the older snapshot,
whole, under its own id and publish time. A replica that is down is skipped (the next one, or
the primary, answers) and ``/metrics`` counts it. The flows run in-process against the primary;
the readers are the real command and the real service, in processes of their own.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis

from rankflow.connectors.activity_read import ActivityReader
from rankflow.connectors.board_read import BoardReader
from rankflow.connectors.redis_keys import activity_namespace, boards_namespace
from rankflow.connectors.redis_read import read_latest
from rankflow.options import RunOptions
from rankflow.runner import run
from rankflow.services import LocalRedis, free_port
from tests import boards_example as example
from tests.activity.test_activity_flow import line, run_activity
from tests.events import ev
from tests.snapshot_stamp import ageless, stamped, stored_published_at

pytestmark = pytest.mark.redis  # a primary and a replica of its own

RANKFLOW = [sys.executable, "-m", "rankflow.cli"]


class Primary(LocalRedis):
    """A Redis that sends a replica its data at once (no wait for more replicas to sync together)."""

    def command(self) -> list[str]:
        return [*super().command(), "--repl-diskless-sync-delay", "0"]


class Replica(LocalRedis):
    """``redis-server --replicaof``: a read-only replica of the Redis at ``of_port``."""

    name = "replica"

    def __init__(self, port: int, workdir: Path, of_port: int, *options: str) -> None:
        super().__init__(port, workdir)
        self.of_port, self.options = of_port, options

    def command(self) -> list[str]:
        return [*super().command(), "--replicaof", "127.0.0.1", str(self.of_port), *self.options]


class LinkProxy:
    """A TCP relay between a replica and its primary whose primary-to-replica direction can be
    held (:meth:`pause`): the replica's link lags, as on a slow or congested network, while the
    replica stays a replica and answers what it has."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.flowing = threading.Event()
        self.flowing.set()
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def pause(self) -> None:
        self.flowing.clear()

    def resume(self) -> None:
        self.flowing.set()

    def close(self) -> None:
        self.flowing.set()
        for s in [self.server, *self.sockets]:
            s.close()

    def _accept(self) -> None:
        while True:
            try:
                replica, _ = self.server.accept()
                primary = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                return
            self.sockets += [replica, primary]
            threading.Thread(target=self._pump, args=(replica, primary, None), daemon=True).start()
            threading.Thread(target=self._pump, args=(primary, replica, self.flowing), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, gate: threading.Event | None) -> None:
        try:
            while data := src.recv(65536):
                if gate is not None:
                    gate.wait()
                dst.sendall(data)
        except OSError:
            pass
        finally:
            src.close()
            dst.close()


class Pair:
    """The primary, its replica behind the relay, and clients of both."""

    def __init__(self, tmp: Path) -> None:
        self.primary = Primary(free_port(), tmp / "primary").start()
        self.proxy = LinkProxy(self.primary.port)
        self.replica = Replica(free_port(), tmp / "replica", self.proxy.port).start()
        self.url, self.replica_url = self.primary.url, self.replica.url
        self.p = redis.Redis.from_url(self.url)
        self.r = redis.Redis.from_url(self.replica_url)

    def caught_up(self, timeout: float = 30) -> None:
        """Wait until the replica has everything the primary had when this was called."""
        offset = int(self.p.info("replication")["master_repl_offset"])
        deadline = time.monotonic() + timeout
        while True:
            info = self.r.info("replication")
            if info["master_link_status"] == "up" and int(info["slave_repl_offset"]) >= offset:
                return
            assert time.monotonic() < deadline, info
            time.sleep(0.02)

    def stop(self) -> None:
        self.p.close()
        self.r.close()
        self.replica.stop()
        self.proxy.close()
        self.primary.stop()


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    services = Pair(tmp_path_factory.mktemp("replicas"))
    yield services
    services.stop()


def publish(url: str, tmp: Path, namespace: str, *, plays: list[bytes], scores: list[bytes]) -> None:
    """The listeners' and the boards' runs of ``plays`` and ``scores`` into ``namespace``, each
    resumed from its recovery directory in ``tmp`` (a later call appends to the same logs:
    its snapshots are newer, with higher ids)."""
    for flow, lines, extra in (("listeners", plays, {"k_max": 5}), ("boards", scores,
                                                                     {"signing_key": example.KEY})):
        log = tmp / f"{flow}.jsonl"
        with log.open("ab") as f:
            f.write(b"".join(x + b"\n" for x in lines))
        final = run(RunOptions(input=f"jsonl:{log}", until_eof=True, redis_url=url, namespace=namespace,
                               dead_letter=f"jsonl:{tmp / f'dead-{flow}.jsonl'}", flow=flow,
                               recovery_dir=str(tmp / f"recovery-{flow}"), **extra))
        assert final is not None


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RANKFLOW, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def answer(*args: str) -> dict[str, Any]:
    r = cli(*args, "--json")
    assert r.returncode == 0, r.stderr
    return orjson.loads(r.stdout)


@contextmanager
def serving(*args: str) -> Iterator[httpx.Client]:
    """``rankflow serve`` with ``args``, once it answers."""
    port = free_port()
    proc = subprocess.Popen([*RANKFLOW, "serve", "--port", str(port), "--poll-ms", "50", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                client.get("/health")
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.communicate()[1]
                assert time.monotonic() < deadline
                time.sleep(0.05)
        yield client
    finally:
        client.close()
        proc.terminate()
        proc.communicate(timeout=30)


def until(read: Callable[[], Any], holds: Callable[[Any], bool], timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if holds(value):
            return value
        assert time.monotonic() < deadline, value
        time.sleep(0.02)


def metrics(api: httpx.Client) -> dict[str, float]:
    """``/metrics``' samples of the read endpoints, by their line's name and labels."""
    lines = api.get("/metrics").text.splitlines()
    return {name: float(value) for name, _, value in (x.rpartition(" ") for x in lines)
            if name.startswith("rankflow_api_redis_read")}


def label(name: str, **labels: str) -> str:
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def where(url: str) -> str:
    return url.removeprefix("redis://")


@pytest.fixture(scope="module")
def everything(pair: Pair, tmp_path_factory: pytest.TempPathFactory) -> str:
    """One namespace with all three products published to the primary, the replica caught up."""
    tmp = tmp_path_factory.mktemp("everything")
    out = run_activity(pair.url, tmp, [line("A", f"c{i % 3}", f"u{i}", 1_800_000_000_000 + i) for i in range(9)],
                       k_max=5)
    namespace = out["namespace"]
    publish(pair.url, tmp, namespace, plays=[ev(f"u{i}", f"p{i}", f"s{i % 2}", "START", 1) for i in range(5)],
            scores=example.LINES)
    pair.caught_up()
    return namespace


def test_readers_on_a_caught_up_replica_answer_the_primarys_snapshots(pair, everything, tmp_path):
    ns, on_replica = everything, ("--redis", pair.url, "--namespace", everything, "--redis-read", pair.replica_url)
    primary = redis.Redis.from_url(pair.url)
    boards, activity, latest = BoardReader(primary, ns), ActivityReader(primary, ns), read_latest(primary, ns)
    assert latest is not None
    commands_before = int(pair.r.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))
    # the reader commands
    top = answer("top", "-k", "3", *on_replica)
    assert (top["snapshot_id"], top["published_at"], top["items"]) == (latest["snapshot_id"],
                                                                       latest["published_at"], latest["items"][:3])
    boards_at = stored_published_at(primary, boards_namespace(ns))
    activity_at = stored_published_at(primary, activity_namespace(ns))
    assert stamped(answer("boards", "top", "--game", "g1", "--board", "all", "-n", "3", *on_replica), boards_at) \
        == stamped(boards.top("g1", "all", 3), boards_at)
    assert stamped(answer("boards", "player", "--game", "g1", "--board", "daily", "--player", "cy", *on_replica),
                   boards_at) == stamped(boards.player("g1", "daily", "cy"), boards_at)
    assert stamped(answer("boards", "around", "--game", "g1", "--board", "best", "--player", "bo", "-r", "1",
                          *on_replica), boards_at) == stamped(boards.around("g1", "best", "bo", 1), boards_at)
    assert stamped(answer("activity", "top", "--workspace", "A", "-k", "2", *on_replica), activity_at) \
        == stamped(activity.top("A", 2), activity_at)
    assert stamped(answer("activity", "channel", "--workspace", "A", "--channel", "c1", *on_replica), activity_at) \
        == stamped(activity.channel("A", "c1"), activity_at)
    # the service
    # the service, its boards loaded into memory (in chunks, in transactions) from the replica too;
    # it looks for new snapshots only when told (a poll every 10 minutes)
    with serving(*on_replica, "--board-index", "memory", "--poll-ms", "600000") as api:
        until(lambda: api.get("/health").json(), lambda h: h["board_mirror"]["ready"])
        ranking = until(lambda: api.get("/rankings?k=3"), lambda r: r.status_code == 200).json()
        assert (ranking["snapshot_id"], ranking["items"]) == (latest["snapshot_id"], latest["items"][:3])
        assert stamped(api.get("/boards/g1/all/top?n=3").json(), boards_at) \
            == stamped(boards.top("g1", "all", 3), boards_at)
        assert stamped(api.get("/boards/g1/daily/players/cy").json(), boards_at) \
            == stamped(boards.player("g1", "daily", "cy"), boards_at)
        assert stamped(api.get("/activity/A/top?k=2").json(), activity_at) == stamped(activity.top("A", 2), activity_at)
        # it hears the flows' announcements where it reads: the replica relays them
        until(lambda: pair.r.pubsub_channels(), lambda channels: f"{{{ns}}}:generation".encode() in channels)
        assert f"{{{ns}}}:generation".encode() not in pair.p.pubsub_channels()
        plays = tmp_path / "later.jsonl"
        plays.write_bytes(b"".join(ev(f"w{i}", f"r{i}", "s-later", "START", 1) + b"\n" for i in range(7)))
        later = run(RunOptions(input=f"jsonl:{plays}", until_eof=True, redis_url=pair.url, namespace=ns,
                               dead_letter=f"jsonl:{tmp_path / 'dead.jsonl'}", k_max=5))
        assert later is not None
        ranking = until(lambda: api.get("/rankings?k=3").json(), lambda r: r["items"] == later["items"][:3])
        assert (ranking["snapshot_id"], ranking["published_at"]) == (later["snapshot_id"], later["published_at"])
        seen = metrics(api)
    # every read went to the replica: the primary answered none, the replica ran the read scripts
    assert seen[label("rankflow_api_redis_reads_total", endpoint=where(pair.url), role="primary")] == 0
    assert seen[label("rankflow_api_redis_reads_total", endpoint=where(pair.replica_url), role="replica")] > 0
    assert seen[label("rankflow_api_redis_read_skips_total", endpoint=where(pair.replica_url), reason="down")] == 0
    assert int(pair.r.info("commandstats")["cmdstat_evalsha"]["calls"]) > commands_before
    primary.close()


def test_a_lagging_replica_answers_the_older_whole_snapshot_named_by_its_id(pair, tmp_path, namespace):
    on_replica = ("--redis", pair.url, "--namespace", namespace, "--redis-read", pair.replica_url)
    primary = redis.Redis.from_url(pair.url)
    publish(pair.url, tmp_path, namespace, plays=[ev(f"u{i}", f"p{i}", "s-old", "START", 1) for i in range(3)],
            scores=example.LINES[:4])
    pair.caught_up()
    old, old_top = read_latest(primary, namespace), BoardReader(primary, namespace).top("g1", "all", 10)
    assert old is not None
    old_at = stored_published_at(primary, boards_namespace(namespace))
    assert old_top["published_at"] == old_at
    with serving(*on_replica) as api:
        until(lambda: api.get("/rankings?k=3"), lambda r: r.status_code == 200)
        pair.proxy.pause()
        try:
            publish(pair.url, tmp_path, namespace,
                    plays=[ev(f"v{i}", f"q{i}", "s-new", "START", 2) for i in range(4)],
                    scores=example.LINES[4:])
            new, new_top = read_latest(primary, namespace), BoardReader(primary, namespace).top("g1", "all", 10)
            assert new is not None and new["snapshot_id"] > old["snapshot_id"]
            assert new_top["snapshot_id"] > old_top["snapshot_id"] and new_top["items"] != old_top["items"]
            new_at = stored_published_at(primary, boards_namespace(namespace))
            assert new_top["published_at"] == new_at > old_at
            # the replica lags: every reader answers the older snapshot, whole, under its id and age
            top = answer("top", "-k", "5", *on_replica)
            assert (top["snapshot_id"], top["published_at"], top["items"]) == (old["snapshot_id"],
                                                                               old["published_at"], old["items"])
            assert top["age_ms"] >= 0
            # the boards too: the older snapshot's id AND its publication, never the newer's
            assert stamped(answer("boards", "top", "--game", "g1", "--board", "all", *on_replica), old_at) \
                == stamped(old_top, old_at)
            ranking = api.get("/rankings?k=5").json()
            assert (ranking["snapshot_id"], ranking["published_at"], ranking["items"]) \
                == (old["snapshot_id"], old["published_at"], old["items"])
            assert stamped(api.get("/boards/g1/all/top").json(), old_at) == stamped(old_top, old_at)
            # the primary has the new one
            assert answer("top", "-k", "5", "--redis", pair.url, "--namespace", namespace)["snapshot_id"] \
                == new["snapshot_id"]
        finally:
            pair.proxy.resume()
        pair.caught_up()
        # caught up: the new snapshot, whole
        ranking = until(lambda: api.get("/rankings?k=5").json(), lambda r: r["snapshot_id"] == new["snapshot_id"])
        assert ranking["items"] == new["items"]
        until(lambda: api.get("/boards/g1/all/top").json(), lambda r: ageless(r) == ageless(new_top))
    assert answer("top", "-k", "5", *on_replica)["items"] == new["items"]
    assert stamped(answer("boards", "top", "--game", "g1", "--board", "all", *on_replica), new_at) \
        == stamped(new_top, new_at)
    primary.close()


class RefusingReplica(Replica):
    """A replica whose primary cannot be reached, set not to serve stale data: it answers every
    read, ``PING`` too, with ``MASTERDOWN``."""

    name = "refusing"

    def __init__(self, port: int, workdir: Path) -> None:
        super().__init__(port, workdir, free_port(), "--replica-serve-stale-data", "no")

    def ready(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"-MASTERDOWN")
        except OSError:
            return False


@pytest.fixture
def refusing(tmp_path: Path) -> Iterator[str]:
    """A replica that refuses reads: its primary cannot be reached, and it is set not to serve
    stale data (``MASTERDOWN``)."""
    service = RefusingReplica(free_port(), tmp_path / "refusing").start()
    yield service.url
    service.stop()


def test_a_replica_that_is_down_is_skipped_and_counted(pair, everything, refusing):
    down = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    primary = redis.Redis.from_url(pair.url)
    at = stored_published_at(primary, boards_namespace(everything))
    expected = stamped(BoardReader(primary, everything).top("g1", "all", 3), at)
    common = ("--redis", pair.url, "--namespace", everything)
    # the next replica answers
    r = cli("boards", "top", "--game", "g1", "--board", "all", "-n", "3", "--json", *common,
            "--redis-read", down, "--redis-read", pair.replica_url)
    assert r.returncode == 0 and stamped(orjson.loads(r.stdout), at) == expected
    assert f"Redis replica {where(down)} is down" in r.stderr
    r = cli("boards", "top", "--game", "g1", "--board", "all", "-n", "3", "--json", *common,
            "--redis-read", refusing, "--redis-read", pair.replica_url)
    assert r.returncode == 0 and stamped(orjson.loads(r.stdout), at) == expected
    assert f"Redis replica {where(refusing)} is refusing (MasterDownError: Link with MASTER is down" in r.stderr
    # every replica down: the primary answers
    r = cli("boards", "top", "--game", "g1", "--board", "all", "-n", "3", "--json", *common, "--redis-read", down)
    assert r.returncode == 0 and stamped(orjson.loads(r.stdout), at) == expected
    # the service: answers from the replica, the skips counted
    with serving(*common, "--redis-read", down, "--redis-read", refusing, "--redis-read", pair.replica_url) as api:
        assert stamped(until(lambda: api.get("/boards/g1/all/top?n=3"), lambda r: r.status_code == 200).json(), at) \
            == expected
        seen = metrics(api)
        assert seen[label("rankflow_api_redis_read_skips_total", endpoint=where(down), reason="down")] >= 1
        assert seen[label("rankflow_api_redis_read_skips_total", endpoint=where(refusing), reason="refusing")] >= 1
        assert seen[label("rankflow_api_redis_read_skipped", endpoint=where(down))] == 1
        assert seen[label("rankflow_api_redis_read_skipped", endpoint=where(refusing))] == 1
        assert seen[label("rankflow_api_redis_reads_total", endpoint=where(pair.replica_url), role="replica")] > 0
        assert seen[label("rankflow_api_redis_reads_total", endpoint=where(pair.url), role="primary")] == 0
        assert api.get("/health").json()["redis"] == "ok"
    primary.close()


@pytest.mark.parametrize("args,env", [
    (["top", "--redis-read", "notaurl"], {}),
    (["boards", "top", "--game", "g", "--board", "all", "--redis-read", "redis://u:s3cret@h:port/0"], {}),
    (["activity", "top", "--global"], {"RANKFLOW_REDIS_READ_URL": "redis://h:6379/0,ftp://h/0"}),
    (["serve", "--redis-read", "redis://h:6379/0?socket_timeout=soon"], {}),
])
def test_a_bad_read_url_is_one_line_and_exit_2(args, env):
    r = cli(*args, "--redis", "redis://127.0.0.1:1/0", env=env)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("rankflow: --redis-read ") and r.stderr.count("\n") == 1, r.stderr
    assert "s3cret" not in r.stderr and r.stdout == ""
