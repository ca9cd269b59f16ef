"""One run over three hosts (network namespaces, ``netns.py``): exact against one process, a host
lost (killed, or its link cut) stops the others with one line and the restarted cluster finishes
exactly, peers that never come, signals at any moment, and a resume with more or fewer processes.

Every process of a run shares one recovery directory (docs/operations.md says why): the hosts
see the test's file system, as machines see a shared volume.
"""

from __future__ import annotations

import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from rankflow.connectors.board_read import read_boards
from rankflow.connectors.redis_read import read_counts, read_history, read_latest
from rankflow.generate import generate
from rankflow.generate_scores import ScoreChaos, generate_scores
from rankflow.options import RunOptions
from tests.cluster.netns import Cluster, Process
from tests.events import ranking, recent
from tests.model import Model
from tests.waiting import wait_for

pytestmark = [pytest.mark.netns, pytest.mark.redis, pytest.mark.broker]

KEY = bytes.fromhex("cd" * 32)
PEER_TIMEOUT = 10  # seconds: short, so a lost host stops the run soon, and long enough for three processes
# to start on a busy machine (the default is 60)
BOUND = 90.0  # seconds within which a process must have stopped: a hang fails, a slow machine does not
PARTITIONS = 6
KEYS = {"listeners": "user_id", "boards": "player_id"}


def backlog(product: str, path: Path) -> list[bytes]:
    if product == "listeners":
        generate(users=1_500, songs=200, events=12_000, seed=40, out=path)
    else:
        generate_scores(players=1_000, games=2, events=8_000, seed=40, out=path, key=KEY, days=5,
                        chaos=ScoreChaos())
    return path.read_bytes().splitlines()


def product_args(product: str) -> list[str]:
    return ["--flow", product, "--signing-key", KEY.hex()] if product == "boards" else ["--flow", product]


def redis_namespace(product: str, namespace: str) -> str:
    return RunOptions(input="jsonl:x", namespace=namespace, flow=product).redis_namespace


def finish(processes: list[Process], status: int = 0) -> None:
    """Every process ends (a hang fails the test) with ``status``."""
    for p in processes:
        try:
            p.proc.wait(timeout=BOUND)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running after {BOUND} s: {p.lines()[-3:]}")
        assert p.proc.returncode == status, (p.proc.returncode, p.lines()[-5:])


def published(cluster: Cluster, product: str, namespace: str) -> dict[str, Any]:
    """What a run published, read back as the readers read it."""
    ns = redis_namespace(product, namespace)

    def read(client: Any) -> dict[str, Any]:
        final = read_latest(client, ns)
        if product == "listeners":
            return {"final": final, "counts": read_counts(client, ns), "history": read_history(client, ns)}
        return {"final": final, "boards": read_boards(client, namespace), "history": read_history(client, ns)}
    return cluster.with_redis(read)


def same_results(product: str, got: dict[str, Any], expected: dict[str, Any]) -> None:
    a, b = got["final"], expected["final"]
    assert a["positions"] == b["positions"]
    assert a["dead_letters"] == b["dead_letters"]
    if product == "listeners":
        assert ranking(a) == ranking(b)
        assert recent(a) == recent(b)
        for field in ("total_listeners", "counted_users", "active_songs"):
            assert a[field] == b[field], field
        assert got["counts"] == expected["counts"]
    else:
        assert got["boards"] == expected["boards"]


def model_of_prefixes(parts: dict[str, list[bytes]], positions: dict[str, int]) -> Model:
    """The listener model of what a snapshot says it holds: each partition's first messages (a user's
    events are all in one partition, so the partitions' order among one another does not matter)."""
    model = Model()
    for part, messages in sorted(parts.items()):
        for line in messages[:positions.get(part, 0)]:
            model.apply_line(line, part)
    return model


@pytest.mark.parametrize("product", ["listeners", "boards"])
def test_three_hosts_publish_what_one_process_does(hosts, tmp_path, product):
    lines = backlog(product, tmp_path / "events.jsonl")
    topic = f"{product}-{uuid.uuid4().hex[:8]}"
    hosts.produce(tmp_path / "events.jsonl", topic, PARTITIONS, KEYS[product])
    common = [*product_args(product), "--input", f"kafka:{hosts.kafka}/{topic}", "--until-eof", "--barrier-ms", "100"]
    one = hosts.start(hosts.hosts[0], ["run", *common, "--redis", hosts.redis_url, "--namespace", f"one-{topic}",
                                       "--dead-letter", f"jsonl:{tmp_path / 'dead-one.jsonl'}"], f"one-{product}")
    finish([one])
    three = hosts.start_run(hosts.places(), [*common, "--namespace", f"three-{topic}", "--recovery-dir", str(tmp_path / "rec"),
                                             "--dead-letter", f"jsonl:{tmp_path / 'dead-three.jsonl'}",
                                             "--peer-timeout", str(PEER_TIMEOUT)], f"three-{product}")
    finish(three)
    expected, got = published(hosts, product, f"one-{topic}"), published(hosts, product, f"three-{topic}")
    assert sum(expected["final"]["positions"].values()) == len(lines)
    same_results(product, got, expected)
    dead_one = (tmp_path / "dead-one.jsonl").read_bytes().splitlines()
    dead_three = (tmp_path / "dead-three.jsonl").read_bytes().splitlines()
    assert sorted(dead_three) == sorted(dead_one) and len(dead_one) == got["final"]["dead_letters"]


@pytest.mark.parametrize("how", ["kill -9", "link cut"])
def test_a_lost_host_stops_the_others_and_the_restarted_cluster_is_exact(hosts, tmp_path, how):
    lines = backlog("listeners", tmp_path / "events.jsonl")
    half = len(lines) // 2
    (tmp_path / "first.jsonl").write_bytes(b"".join(line + b"\n" for line in lines[:half]))
    (tmp_path / "rest.jsonl").write_bytes(b"".join(line + b"\n" for line in lines[half:]))
    topic = ns = f"lost-{uuid.uuid4().hex[:8]}"
    hosts.produce(tmp_path / "first.jsonl", topic, PARTITIONS, "user_id")
    args = ["--input", f"kafka:{hosts.kafka}/{topic}", "--namespace", ns, "--barrier-ms", "100",
            "--recovery-dir", str(tmp_path / "rec"), "--dead-letter", f"jsonl:{tmp_path / 'dead.jsonl'}",
            "--peer-timeout", str(PEER_TIMEOUT)]
    run = hosts.start_run(hosts.places(), args, ns)

    def position() -> int:
        snap = hosts.with_redis(lambda client: read_latest(client, ns))
        return sum(snap["positions"].values()) if snap else -1
    wait_for(position, lambda p: p == half, timeout=BOUND)
    hosts.produce(tmp_path / "rest.jsonl", topic, PARTITIONS, "user_id")
    wait_for(position, lambda p: p > half, timeout=BOUND)  # mid-run: the second half is being published
    lost = hosts.hosts[2]
    if how == "kill -9":
        run[2].proc.kill()
        survivors = run[:2]
    else:
        hosts.cut(lost)
        survivors = run
    started = time.monotonic()
    for p in survivors:
        try:
            p.proc.wait(timeout=BOUND)
        except subprocess.TimeoutExpired:
            pytest.fail(f"a process still runs {BOUND} s after {how}: {p.lines()[-3:]}")
        assert p.proc.returncode != 0
        said = p.errors()
        assert len(said) == 1, said
    for p in run[:2]:  # the lost one, or also the other that stopped for it first
        assert "stopped: lost the connection to " in p.errors()[0]
    assert any("process 2 (10.40.0.13:7000)" in p.errors()[0] for p in run[:2])
    assert time.monotonic() - started < BOUND

    parts = hosts.read_partitions(topic)
    for snap in published(hosts, "listeners", ns)["history"]:  # never anything a prefix does not give
        model = model_of_prefixes(parts, snap["positions"])
        assert ranking(snap) == model.ranking(100), snap["snapshot_id"]
        assert snap["counted_users"] == model.counted_users

    hosts.mend(lost)
    restarted = hosts.start_run(hosts.places(), [*args, "--until-eof"], ns)
    finish(restarted)
    final = published(hosts, "listeners", ns)["final"]
    model = model_of_prefixes(parts, {part: len(messages) for part, messages in parts.items()})
    assert final["positions"] == {part: len(messages) for part, messages in parts.items()}
    assert ranking(final) == model.ranking(100)
    assert final["counted_users"] == model.counted_users
    assert final["dead_letters"] == model.dead_letters
    assert len((tmp_path / "dead.jsonl").read_bytes().splitlines()) == model.dead_letters, "written exactly once"


def test_a_process_whose_peers_never_come_stops_by_itself(hosts, tmp_path):
    log = tmp_path / "events.jsonl"
    generate(users=50, songs=10, events=200, seed=1, out=log)
    addresses = ",".join(f"{h.ip}:7000" for h in hosts.hosts)
    common = ["run", "--input", f"jsonl:{log}", "--redis", hosts.redis_url, "--namespace", f"alone-{uuid.uuid4().hex[:8]}",
              "--dead-letter", f"jsonl:{tmp_path / 'dead.jsonl'}", "--addresses", addresses]
    alone = hosts.start(hosts.hosts[0], [*common, "--process-id", "0", "--run-id", "a", "--peer-timeout", "2"], "alone")
    finish([alone], status=1)
    assert len(alone.errors()) == 1
    assert "only 0 of the 2 other processes of the run" in alone.errors()[0]


@pytest.mark.parametrize("sig,status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_a_process_waiting_for_its_peers(hosts, tmp_path, sig, status):
    """Process 1 connects to process 0, which never comes: timely retries for ever, inside Bytewax,
    where Python's handlers do not run (it ignored both signals for more than ten minutes)."""
    log = tmp_path / "events.jsonl"
    generate(users=50, songs=10, events=200, seed=1, out=log)
    addresses = ",".join(f"{h.ip}:7000" for h in hosts.hosts)
    waiting = hosts.start(hosts.hosts[1], ["run", "--input", f"jsonl:{log}", "--redis", hosts.redis_url,
                                           "--namespace", f"waiting-{uuid.uuid4().hex[:8]}", "--dead-letter", f"jsonl:{tmp_path / 'd.jsonl'}",
                                           "--addresses", addresses, "--process-id", "1", "--run-id", "w"], "waiting")
    wait_for(lambda: waiting.stdout.read_text(), lambda out: "error connecting to worker 0" in out, timeout=BOUND)
    waiting.proc.send_signal(sig)
    finish([waiting], status=status)
    assert waiting.errors() == [waiting.errors()[0]] and "while waiting for the other processes" in waiting.errors()[0]


def test_a_signal_to_one_process_of_a_running_cluster_stops_it(hosts, tmp_path):
    """SIGTERM asks one process for the graceful stop; the others go on reading, so the stop cannot
    complete: it ends after the peer timeout with one line, and the others stop as on a lost host."""
    log = tmp_path / "events.jsonl"
    generate(users=50, songs=10, events=200, seed=1, out=log)
    run = hosts.start_run(hosts.places(), ["--input", f"jsonl:{log}", "--namespace", "term", "--barrier-ms", "100",
                                           "--dead-letter", f"jsonl:{tmp_path / 'd.jsonl'}",
                                           "--peer-timeout", str(PEER_TIMEOUT)], "term")
    wait_for(lambda: hosts.with_redis(lambda client: read_latest(client, "term")), lambda snap: snap is not None,
             timeout=BOUND)
    run[1].proc.send_signal(signal.SIGTERM)
    finish([run[1]], status=143)
    assert "stopped by SIGTERM" in run[1].errors()[-1] and len(run[1].errors()) == 1
    finish([run[0], run[2]], status=1)


@pytest.mark.parametrize(("processes", "shard_by"), [(2, "user"), (4, "user"), (4, "partition")])
def test_three_processes_resume_with_another_number(hosts, tmp_path, processes, shard_by):
    """Keyed by user, three processes' state resumes exactly with two or four; keyed by input
    partition (the default), a shard's key names the worker that read its partition, so another
    number of workers is refused, each process with one line saying how to resume."""
    lines = backlog("listeners", tmp_path / "events.jsonl")
    half = len(lines) // 2
    (tmp_path / "first.jsonl").write_bytes(b"".join(line + b"\n" for line in lines[:half]))
    (tmp_path / "rest.jsonl").write_bytes(b"".join(line + b"\n" for line in lines[half:]))
    topic = f"rescale-{uuid.uuid4().hex[:8]}"
    ns = f"rescale{processes}-{topic}"
    hosts.produce(tmp_path / "first.jsonl", topic, PARTITIONS, "user_id")
    args = ["--input", f"kafka:{hosts.kafka}/{topic}", "--namespace", ns, "--barrier-ms", "100", "--until-eof",
            "--recovery-dir", str(tmp_path / "rec"), "--dead-letter", f"jsonl:{tmp_path / 'dead.jsonl'}",
            "--peer-timeout", str(PEER_TIMEOUT), "--shard-by", shard_by]
    finish(hosts.start_run(hosts.places(3), args, ns))
    hosts.produce(tmp_path / "rest.jsonl", topic, PARTITIONS, "user_id")
    rescaled = hosts.start_run(hosts.places(processes), args, ns)
    if shard_by == "partition":
        finish(rescaled, status=2)
        for p in rescaled:
            assert len(p.errors()) == 1 and "resume with as many" in p.errors()[0], p.errors()
        return
    finish(rescaled)
    parts = hosts.read_partitions(topic)
    final = published(hosts, "listeners", ns)["final"]
    model = model_of_prefixes(parts, {part: len(messages) for part, messages in parts.items()})
    assert final["positions"] == {part: len(messages) for part, messages in parts.items()}
    assert ranking(final) == model.ranking(100)
    assert final["counted_users"] == model.counted_users
    assert final["dead_letters"] == model.dead_letters
    assert len((tmp_path / "dead.jsonl").read_bytes().splitlines()) == model.dead_letters

