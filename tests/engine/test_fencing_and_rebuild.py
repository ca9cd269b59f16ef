"""Two runs on one namespace, and a rebuild that replaces a live ranking atomically."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import orjson
import pytest

from rankflow.connectors import redis_generations
from rankflow.connectors.activity_read import ActivityReader
from rankflow.connectors.board_read import BoardReader, read_boards
from rankflow.connectors.kafka import KafkaEndpoint, admin
from rankflow.connectors.redis_generations import current_generation, drop_generation, switch_generation
from rankflow.connectors.redis_keys import Keys
from rankflow.connectors.redis_read import read_counts, read_latest
from rankflow.generate import generate
from rankflow.options import FLOWS, RunOptions
from rankflow.produce import produce_file
from rankflow.rebuild import rebuild
from rankflow.runner import run
from rankflow.services import free_port
from tests.events import ranking
from tests.flow_logs import LOGS
from tests.model import model_of_lines, read_lines

RANKFLOW = [sys.executable, "-m", "rankflow.cli"]


def wait_until(predicate, timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def produced_log(tmp_path, kafka_brokers, topic):
    log = tmp_path / "events.jsonl"
    generate(users=800, songs=80, events=15_000, seed=31, out=log)
    produce_file(str(log), KafkaEndpoint(kafka_brokers, topic), partitions=2, progress=False)
    return read_lines(str(log))


def test_a_second_run_fences_the_first(tmp_path, redis_url, redis_client, namespace):
    log = tmp_path / "events.jsonl"
    generate(users=100, songs=20, events=2_000, seed=2, out=log)
    common = ["--input", f"jsonl:{log}", "--redis", redis_url, "--namespace", namespace, "--barrier-ms", "50"]
    first = subprocess.Popen([*RANKFLOW, "run", *common, "--dead-letter", f"jsonl:{tmp_path / 'a.jsonl'}"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: read_latest(redis_client, namespace) is not None, what="the first run's ranking")
        second = subprocess.run([*RANKFLOW, "run", *common, "--until-eof",
                                 "--dead-letter", f"jsonl:{tmp_path / 'b.jsonl'}"],
                                capture_output=True, text=True, timeout=120)
        assert second.returncode == 0, second.stderr
        _, err = first.communicate(timeout=60)
    finally:
        first.kill()
    assert first.returncode == 1
    assert "a newer run took the namespace" in err
    snap = read_latest(redis_client, namespace)
    assert snap["run"] == snap["snapshot_id"] // 10**9 and ranking(snap) == model_of_lines(read_lines(str(log))).ranking(100)


def test_a_multi_process_run_started_over_must_take_a_new_run_id(tmp_path, redis_url, redis_client, namespace):
    """Restarted without recovery state and with its old run id, a run would get its old
    token back and snapshot ids below the stored ones: all ignored, and the count table
    would drift. It is refused instead, and what readers see stays right."""
    log = tmp_path / "events.jsonl"
    generate(users=300, songs=40, events=4_000, seed=17, out=log)
    model = model_of_lines(read_lines(str(log)))
    addresses = f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}"
    run_id = uuid.uuid4().hex

    def run_both() -> list[tuple[int, str]]:
        """Both processes of the run, to their end: (exit status, stderr) of each."""
        errs = [tempfile.TemporaryFile() for _ in (0, 1)]
        procs = [subprocess.Popen([*RANKFLOW, "run", "--input", f"jsonl:{log}", "--until-eof", "--redis", redis_url,
                                   "--namespace", namespace, "--barrier-ms", "50", "--addresses", addresses,
                                   "--process-id", str(i), "--run-id", run_id,
                                   "--dead-letter", f"jsonl:{tmp_path / 'dead.jsonl'}"],
                                  stdout=subprocess.DEVNULL, stderr=errs[i]) for i in (0, 1)]
        try:
            statuses = [p.wait(timeout=120) for p in procs]
        finally:
            for p in procs:
                p.kill()
        outcomes = []
        for status, err in zip(statuses, errs):
            err.seek(0)
            outcomes.append((status, err.read().decode()))
            err.close()
        return outcomes

    first = run_both()
    assert [status for status, _ in first] == [0, 0], first
    published = read_latest(redis_client, namespace)
    assert ranking(published) == model.ranking(100) and read_counts(redis_client, namespace) == model.counts

    again = run_both()
    for status, err in again:
        assert status == 1, err
        assert f"run id '{run_id}' belongs to run {published['run']}, which already published" in err
        assert "give it a new --run-id (or resume it with its --recovery-dir)" in err
    assert read_latest(redis_client, namespace) == published
    assert read_counts(redis_client, namespace) == model.counts


def test_rebuild_switches_readers_atomically_and_stops_the_live_run(
        tmp_path, kafka_brokers, topic, redis_url, redis_client, namespace, produced_log):
    model = model_of_lines(produced_log)
    source = f"kafka:{kafka_brokers}/{topic}"
    live = subprocess.Popen([*RANKFLOW, "run", "--input", source, "--redis", redis_url, "--namespace", namespace,
                             "--barrier-ms", "50", "--dead-letter", f"jsonl:{tmp_path / 'live-dead.jsonl'}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: list[dict] = []
    stop = threading.Event()

    def reader() -> None:
        import redis as redis_lib

        client = redis_lib.Redis.from_url(redis_url)
        while not stop.is_set():
            snap = read_latest(client, namespace)
            if snap is not None and (not seen or seen[-1]["snapshot_id"] != snap["snapshot_id"]):
                seen.append(snap)
        client.close()

    try:
        wait_until(lambda: (s := read_latest(redis_client, namespace)) is not None
                   and sum(s["positions"].values()) == len(produced_log), what="the live run to catch up")
        thread = threading.Thread(target=reader)
        thread.start()
        rebuilt = subprocess.run([*RANKFLOW, "rebuild", "--input", source, "--redis", redis_url,
                                  "--namespace", namespace, "--barrier-ms", "20",
                                  "--dead-letter", f"jsonl:{tmp_path / 'rebuild-dead.jsonl'}"],
                                 capture_output=True, text=True, timeout=300)
        assert rebuilt.returncode == 0, rebuilt.stderr
        _, live_err = live.communicate(timeout=60)
        stop.set()
        thread.join()
    finally:
        stop.set()
        live.kill()
    assert live.returncode == 1 and "rebuild replaced this run's ranking" in live_err

    final = read_latest(redis_client, namespace)
    generation = current_generation(redis_client, namespace)
    assert generation == final["run"] != 0
    assert ranking(final) == model.ranking(100)
    assert final["total_listeners"] == final["counted_users"] == model.counted_users
    assert read_counts(redis_client, namespace) == model.counts
    assert redis_client.exists(*Keys(namespace, 0).generation_keys()) == 0, "the old generation is removed"
    rebuild_snapshots = [s for s in seen if s["run"] == generation]
    assert rebuild_snapshots and all(s["snapshot_id"] == final["snapshot_id"] for s in rebuild_snapshots), \
        "readers saw a half-built ranking"
    assert all(sum(s["positions"].values()) == len(produced_log) for s in seen)


def generations(client, namespace: str) -> set[bytes]:
    return {k.split(b":")[1] for k in client.keys(f"{{{namespace}}}:g[0-9]*")}


def test_a_failed_rebuild_leaves_readers_on_the_old_generation(tmp_path, kafka_brokers, redis_url,
                                                               redis_client, namespace, produced_log, topic):
    source = f"kafka:{kafka_brokers}/{topic}"
    common = ["--redis", redis_url, "--namespace", namespace, "--dead-letter", f"jsonl:{tmp_path / 'd.jsonl'}"]
    assert subprocess.run([*RANKFLOW, "run", "--input", source, "--until-eof", *common],
                          capture_output=True, timeout=120).returncode == 0
    before = read_latest(redis_client, namespace)

    failed = subprocess.run([*RANKFLOW, "rebuild", "--input", f"kafka:{kafka_brokers}/missing-topic", *common],
                            capture_output=True, text=True, timeout=120)
    assert failed.returncode == 1 and "missing-topic" in failed.stderr
    assert read_latest(redis_client, namespace) == before
    assert generations(redis_client, namespace) == {b"g0"}, "nothing of the failed rebuild is left"

    # A failure after the rebuild claimed its generation: recovery state beyond the topic's end.
    recovery = tmp_path / "recovery"
    assert subprocess.run([*RANKFLOW, "rebuild", "--input", source, "--recovery-dir", str(recovery), *common],
                          capture_output=True, timeout=120).returncode == 0
    switched = read_latest(redis_client, namespace)
    recreate_topic(kafka_brokers, topic, produced_log[:100])
    failed = subprocess.run([*RANKFLOW, "rebuild", "--input", source, "--recovery-dir", str(recovery), *common],
                            capture_output=True, text=True, timeout=120)
    assert failed.returncode == 1, failed.stderr
    assert "resumes at offset" in failed.stderr, failed.stderr
    assert re.search(r"generation \d+\) is removed; readers keep the current ranking \(generation \d+\)", failed.stderr), \
        "the rebuild's generation existed and was dropped"
    assert read_latest(redis_client, namespace) == switched
    assert generations(redis_client, namespace) == {f"g{switched['run']}".encode()}, "nothing of it is left"


def recreate_topic(brokers: str, topic: str, lines: list[bytes]) -> None:
    """Delete the topic and create it again with fewer events (offsets start over)."""
    client = admin(brokers)  # kept alive until the future resolves
    client.delete_topics([topic])[topic].result(timeout=10)
    wait_until(lambda: topic not in admin(brokers).list_topics(timeout=5).topics, what="the topic to go")
    path = Path(tempfile.mkdtemp()) / "again.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    produce_file(str(path), KafkaEndpoint(brokers, topic), partitions=2, progress=False)


@pytest.fixture(scope="module")
def big_topic(tmp_path_factory, kafka_brokers):
    """Enough events that a rebuild is still replaying when the test stops it."""
    log = tmp_path_factory.mktemp("big") / "events.jsonl"
    generate(users=20_000, songs=500, events=150_000, seed=37, out=log)
    topic = "big-" + uuid.uuid4().hex[:8]
    produce_file(str(log), KafkaEndpoint(kafka_brokers, topic), partitions=2, progress=False)
    return topic, read_lines(str(log))


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_rebuild_stopped_midway_switches_nothing(tmp_path, kafka_brokers, redis_url, redis_client, namespace,
                                                   big_topic, signum):
    topic, lines = big_topic
    source = f"kafka:{kafka_brokers}/{topic}"
    common = ["--redis", redis_url, "--namespace", namespace, "--dead-letter", f"jsonl:{tmp_path / 'd.jsonl'}"]
    assert subprocess.run([*RANKFLOW, "run", "--input", source, "--until-eof", *common],
                          capture_output=True, timeout=300).returncode == 0
    before = read_latest(redis_client, namespace)
    assert sum(before["positions"].values()) == len(lines)

    rebuilding = subprocess.Popen([*RANKFLOW, "rebuild", "--input", source, "--barrier-ms", "20", *common],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: len(generations(redis_client, namespace)) == 2 or rebuilding.poll() is not None,
                   what="the rebuild's generation")
        new = (generations(redis_client, namespace) - {b"g0"}).pop().decode()
        wait_until(lambda: redis_client.exists(f"{{{namespace}}}:{new}:snapshot") or rebuilding.poll() is not None,
                   what="the rebuild's first snapshot")
        partial = orjson.loads(redis_client.get(f"{{{namespace}}}:{new}:snapshot"))
        rebuilding.send_signal(signum)
        _, err = rebuilding.communicate(timeout=120)
    finally:
        rebuilding.kill()
    assert sum(partial["positions"].values()) < len(lines), "stopped while replaying"
    assert rebuilding.returncode == 128 + signum, err
    assert "stopped before the end of its input" in err and "readers stay on the old ranking" in err
    assert read_latest(redis_client, namespace) == before
    assert current_generation(redis_client, namespace) == 0
    assert generations(redis_client, namespace) == {b"g0"}, "the half-built generation is dropped"


def answers_of_listeners(client, namespace: str):
    return lambda: (ranking(read_latest(client, namespace)), read_counts(client, namespace))


def answers_of_boards(client, namespace: str):
    reader = BoardReader(client, namespace)
    return lambda: {(game, board): reader.top(game, board, 10)["items"]
                    for game, boards in read_boards(client, namespace).items() for board in boards}


def answers_of_activity(client, namespace: str):
    reader = ActivityReader(client, namespace)

    def answers():
        top = reader.global_top(10)["items"]
        return top, {i["workspace_id"]: reader.top(i["workspace_id"], 10)["items"] for i in top}
    return answers


READERS = {"listeners": answers_of_listeners, "boards": answers_of_boards, "activity": answers_of_activity}
"""Per flow, readers made before a rebuild: a function of what they answer."""

KINDS = {"listeners": {"counts", "changes"}, "boards": {"b", "r", "aliases", "boards", "board_changes"},
         "activity": {"v", "slots", "workspaces"}}
"""Per flow, the keys of its own a generation holds after the run below (``g<G>:<kind>...``)."""


def keys_by_generation(client, namespace: str) -> dict[int | None, set[str]]:
    """Every key of a namespace, by generation (``None``: the namespace's own keys), without
    the ``{ns}:g<G>:`` prefix."""
    tag = "{" + namespace + "}:"
    found: dict[int | None, set[str]] = {}
    for key in client.scan_iter(match=f"{tag}*", count=1000):
        rest = key.decode()[len(tag):]
        m = re.match(r"g(\d+):(.*)", rest, re.S)
        found.setdefault(int(m[1]) if m else None, set()).add(m[2] if m else rest)
    return found


def test_every_flow_has_its_rebuild_checked():
    assert set(READERS) == set(KINDS) == set(LOGS) == set(FLOWS), "a new flow: give it readers and kinds here"


@pytest.mark.parametrize("flow", FLOWS)
def test_a_rebuild_of_each_flow_removes_every_key_of_the_old_generation(tmp_path, redis_url, redis_client,
                                                                       namespace, flow):
    """Run, rebuild: no key of the old generation is left (whatever the flow keeps per workspace,
    board or slot), readers made before the switch answer the same after it, and dropping a
    generation removes all of it."""
    log = tmp_path / "events.jsonl"
    LOGS[flow](log)
    opts = dict(input=f"jsonl:{log}", redis_url=redis_url, namespace=namespace, flow=flow,
                dead_letter=f"jsonl:{tmp_path / 'dead.jsonl'}", publish_stage=1 if flow == "activity" else None)
    run(RunOptions(until_eof=True, **opts))
    ns = RunOptions(**opts).redis_namespace
    old = current_generation(redis_client, ns)
    before = keys_by_generation(redis_client, ns)
    assert set(before) == {None, old}
    assert KINDS[flow] <= {key.split(":", 1)[0] for key in before[old]}, "the run kept its own keys"
    answers = READERS[flow](redis_client, namespace)
    expected = answers()
    assert expected[0] if flow != "boards" else expected, "the readers answer something"

    rebuild(RunOptions(**opts))
    new = current_generation(redis_client, ns)
    after = keys_by_generation(redis_client, ns)
    assert new != old
    assert set(after) == {None, new}, f"keys of generation {old} left: {sorted(after.get(old, ()))[:10]}"
    assert all(key in ("runs", "generation", "retired") or key.startswith("run:") for key in after[None])
    assert answers() == expected, "readers follow the switch"

    drop_generation(redis_client, ns, new)
    assert set(keys_by_generation(redis_client, ns)) == {None}, "a dropped generation leaves nothing"


def test_removing_a_generation_takes_only_its_own_keys(redis_client):
    """Glob characters in a namespace are plain characters: the removal of ``{a*}:g1:`` leaves
    ``{ab}:g1:``, and generation 1 is not generation 10."""
    base = "t-" + uuid.uuid4().hex[:8]
    ns, sibling = base + "\\*[x]?", base + "\\yyxz"
    mine = [Keys(ns, 1).snapshot, Keys(ns, 1).workspace("w"), Keys(ns, 1).board("g", "all")[0]]
    others = [Keys(ns, 10).snapshot, Keys(ns).generation, Keys(sibling, 1).snapshot, Keys(sibling, 1).workspace("w")]
    for key in mine + others:
        redis_client.set(key, 1)
    drop_generation(redis_client, ns, 1)
    assert redis_client.exists(*mine) == 0
    assert redis_client.exists(*others) == len(others)


def test_a_switch_removes_what_an_interrupted_switch_left(monkeypatch, redis_client, namespace):
    """A rebuild stopped between its switch and the removal of the old generation: the next
    switch removes that generation too."""
    for generation in (0, 5):
        redis_client.set(Keys(namespace, generation).snapshot, 1)
        redis_client.set(Keys(namespace, generation).workspace(f"w{generation}"), 1)

    def crash(*_):
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(redis_generations, "drop_generation", crash)
        with pytest.raises(KeyboardInterrupt):
            switch_generation(redis_client, namespace, 0, 5)
    assert current_generation(redis_client, namespace) == 5
    assert set(keys_by_generation(redis_client, namespace)) == {None, 0, 5}
    switch_generation(redis_client, namespace, 5, 7)
    assert set(keys_by_generation(redis_client, namespace)) == {None}
