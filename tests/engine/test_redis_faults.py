"""Redis faults together with crashes, in every flow: nothing lost, against the reference models.

Each flow (listeners, boards, activity) reads a small generated log with chaos from a real
broker, durable (``--recovery-dir``), publishing into a Redis of the test's own, and meets:

* **kill -9 during a Redis stall**: Redis is stopped (SIGSTOP) mid-run, the flow is killed
  once its recovery state has moved past what Redis holds (or at once), Redis resumes,
  the flow is started again;
* **the lost-Redis stop**: Redis stalls longer than ``--redis-retry-s``, the run stops
  with ``lost Redis``, Redis resumes, the run is started again;
* **Redis restored from an older backup**: an RDB saved mid-run, Redis restarted from it
  while the flow is frozen mid-run (listeners heal Redis in place; boards and activity
  stop with one line saying to start again), or after the run ended.

Then the published state must be the reference model's, as a clean run's would be
(``rankflow.resume_point``: a resumed run knows what Redis must hold). Every wait is for a
condition (published positions, the recovery store's, a process's exit), never for a time.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from rankflow.connectors.board_read import read_aliases, read_boards
from rankflow.connectors.kafka import KafkaEndpoint
from rankflow.connectors.redis_keys import activity_namespace, boards_namespace
from rankflow.connectors.redis_read import read_counts, read_latest
from rankflow.generate import Chaos, generate
from rankflow.generate_scores import ScoreChaos, generate_scores
from rankflow.produce import produce_file
from rankflow.resume_point import published_floor
from rankflow.services import LocalRedis, free_port
from tests.activity.test_activity_recovery import check_rankings, message_log, model_of, read_partitions
from tests.boards.test_boards_recovery import board_differences
from tests.boards_model import BoardsModel
from tests.events import ranking
from tests.model import model_of_lines, read_lines

pytestmark = pytest.mark.redis

RANKFLOW = [sys.executable, "-m", "rankflow.cli"]
KEY = bytes.fromhex("cd" * 32)
GUARD_S = 120.0  # a guard against a hung process, never a timing the test relies on


@dataclass
class Case:
    """One flow's log on a topic, its command's own options, and the check of what Redis holds."""

    flow: str
    topic: str
    total: int  # messages in the topic
    args: list[str]
    published: Callable[[str], str]  # the namespace it publishes into
    check: Callable[[redis.Redis, str], None]


def _listeners(tmp: Path, brokers: str) -> Case:
    log = tmp / "events.jsonl"
    generate(users=3_000, songs=150, events=40_000, seed=37, out=log,
             chaos=Chaos(duplicate=0.05, late=0.05, stop_before_start=0.03, old_device=0.02, conflict=0.005))
    lines = read_lines(str(log))
    model = model_of_lines(lines)
    topic = "faults-listeners-" + tmp.name
    produce_file(str(log), KafkaEndpoint(brokers, topic), partitions=3, progress=False)

    def check(client: redis.Redis, namespace: str) -> None:
        final = read_latest(client, namespace)
        assert sum(final["positions"].values()) == len(lines), final["positions"]
        assert ranking(final) == model.ranking(100)
        assert final["total_listeners"] == final["counted_users"] == model.counted_users
        assert read_counts(client, namespace) == model.counts, "the whole count table"
    return Case("listeners", topic, len(lines), ["--song-partitions", "4", "--user-shards", "8"],
                lambda ns: ns, check)


def _boards(tmp: Path, brokers: str) -> Case:
    log = tmp / "scores.jsonl"
    generate_scores(players=3_000, games=3, events=40_000, seed=11, out=log, key=KEY, days=10, chaos=ScoreChaos())
    lines = log.read_bytes().splitlines()
    model = BoardsModel(KEY)
    for offset, line in enumerate(lines):
        model.feed(line, "file", offset)
    boards = model.boards()
    aliases = {g: {k: v.split(":", 1)[1] for k, v in a.items()} for g, a in model.aliases().items()}
    topic = "faults-boards-" + tmp.name
    produce_file(str(log), KafkaEndpoint(brokers, topic), partitions=3, progress=False, key_field="player_id")

    def check(client: redis.Redis, namespace: str) -> None:
        final = read_latest(client, boards_namespace(namespace))
        assert sum(final["positions"].values()) == len(lines), final["positions"]
        got = read_boards(client, namespace)
        assert got == boards, board_differences(got, boards)
        assert read_aliases(client, namespace) == aliases
    return Case("boards", topic, len(lines), ["--flow", "boards", "--signing-key", KEY.hex(), "--partitions", "4",
                                              "--user-shards", "8"], boards_namespace, check)


def _activity(tmp: Path, brokers: str) -> Case:
    log = tmp / "messages.jsonl"
    # 120k messages: the kernel reads 30k in under a second, before a fault placed at a quarter lands
    log.write_bytes(b"".join(line + b"\n" for line in message_log(120_000, 8)))
    topic = "faults-activity-" + tmp.name
    produce_file(str(log), KafkaEndpoint(brokers, topic), partitions=3, progress=False, key_field="workspace_id")
    parts = read_partitions(brokers, topic)
    model, _ = model_of(parts, topic, 5)
    assert model.proviso_holds()
    total = sum(len(v) for v in parts.values())

    def check(client: redis.Redis, namespace: str) -> None:
        final = read_latest(client, activity_namespace(namespace))
        assert sum(final["positions"].values()) == total, final["positions"]
        assert final["watermark"] == model.w
        check_rankings(client, namespace, model)
    return Case("activity", topic, total, ["--flow", "activity", "--window-buckets", "5", "--partitions", "4",
                                           "--publish-stage", "0"], activity_namespace, check)


MAKERS = {"listeners": _listeners, "boards": _boards, "activity": _activity}


@pytest.fixture(scope="module")
def cases(tmp_path_factory, kafka_brokers) -> dict[str, Case]:
    """Each flow's log on its topic, made once: a run only reads its topic."""
    return {name: make(tmp_path_factory.mktemp(name), kafka_brokers) for name, make in MAKERS.items()}


@pytest.fixture
def own_redis(tmp_path) -> Iterator[LocalRedis]:
    """A Redis of the test's own: stopping it, or restarting it from a backup, disturbs no other test."""
    service = LocalRedis(free_port(), tmp_path / "redis").start()
    yield service
    if service.running():
        os.kill(service.pid(), signal.SIGCONT)  # a test that failed while Redis was stopped
    service.stop()


class Run:
    """One flow's command against ``redis``, started in a session of its own (``--processes 2``
    starts children: kill -9 and SIGSTOP go to the whole group)."""

    def __init__(self, case: Case, kafka: str, service: LocalRedis, tmp: Path, namespace: str, processes: int,
                 extra: tuple[str, ...] = ()) -> None:
        self.case, self.service, self.namespace = case, service, namespace
        self.recovery = tmp / "rec"
        common = [*RANKFLOW, "run", *case.args, "--input", f"kafka:{kafka}/{case.topic}", "--until-eof",
                  "--namespace", namespace, "--dead-letter", f"jsonl:{tmp / 'dead.jsonl'}",
                  "--recovery-dir", str(self.recovery), "--barrier-ms", "50", "--read-batch", "500",
                  "--processes", str(processes)]
        # the faulted execution: a short socket timeout, so a stalled Redis fails a call in 0.5 s (then the
        # publisher retries), and the test's own options (a short --redis-retry-s)
        self.command = [*common, "--redis", service.url + "?socket_timeout=0.5", *extra]
        # the restart that must bring Redis to exact: an operator's defaults (a whole board resend can take
        # longer than 0.5 s on a loaded machine)
        self.restart = [*common, "--redis", service.url]
        self.proc: subprocess.Popen[str] | None = None

    def start(self, in_flight: int | None = None) -> subprocess.Popen[str]:
        """``in_flight``: snapshots the publisher may hold before the flow waits (default 2)."""
        env = {**os.environ, **({"RANKFLOW_PUBLISH_IN_FLIGHT": str(in_flight)} if in_flight else {})}
        self.proc = subprocess.Popen(self.command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True, env=env)
        return self.proc

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        assert self.proc is not None
        self.proc.wait()

    def to_the_end(self) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(self.restart, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return done

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.service.url)

    def progress(self) -> int:
        """Messages behind Redis's latest snapshot (-1: none yet)."""
        with self.client() as client:
            snap = read_latest(client, self.case.published(self.namespace))
        return sum(snap["positions"].values()) if snap else -1

    def wait_published(self, target: int) -> None:
        """Until Redis holds a snapshot at ``target`` messages or more; the run must still be running."""
        wait_for(lambda: self.progress() >= target or self._ended(), f"a snapshot at {target} messages")
        assert not self._ended(), f"the run ended before {target} of {self.case.total} messages: make the log bigger"

    def recovered(self) -> int:
        """Messages behind the last snapshot the recovery store has emitted."""
        floor = published_floor(self.recovery, self.case.flow) if self.recovery.exists() else None
        return sum(floor.values()) if floor else -1

    def _ended(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def check(self) -> None:
        with self.client() as client:
            self.case.check(client, self.namespace)


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + GUARD_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def stall(service: LocalRedis) -> None:
    os.kill(service.pid(), signal.SIGSTOP)


def resume(service: LocalRedis) -> None:
    os.kill(service.pid(), signal.SIGCONT)


def restart_from(service: LocalRedis, backup: Path) -> LocalRedis:
    """Redis stopped (no save) and started again on its port from ``backup``, an older RDB."""
    service.stop()
    shutil.copy(backup, service.dir / "dump.rdb")
    return LocalRedis(service.port, service.dir).start()


def save(service: LocalRedis, to: Path) -> None:
    """An RDB of what Redis holds now (``SAVE``), kept at ``to``."""
    with redis.Redis.from_url(service.url) as client:
        client.save()
    shutil.copy(service.dir / "dump.rdb", to)


FLOWS = list(MAKERS)


# The activity flow reads its log in about a second: stalled at a quarter, it has often read its whole
# input, where Bytewax commits its last barriers only when the flow completes (which waits for Redis), so
# its store may never pass Redis before the kill. Its restarts are whole anyway (every execution's first
# snapshot carries every count); "at_once", the lost-Redis stop and the older backups cover them.
KILL_TIMINGS = [(flow, when) for flow in FLOWS for when in ("past", "at_once") if (flow, when) != ("activity", "past")]


@pytest.mark.parametrize("processes", [1, 2])
@pytest.mark.parametrize("flow,when", KILL_TIMINGS)
def test_kill_9_while_redis_stalls(flow, when, processes, cases, kafka_brokers, own_redis, tmp_path, namespace):
    """Killed while Redis is stopped: once the recovery store has moved past the last snapshot
    Redis stored (those snapshots' changes are then in no state the restart replays), or at
    once. The restart must bring Redis to exact."""
    case = cases[flow]
    run = Run(case, kafka_brokers, own_redis, tmp_path, namespace, processes)
    # "past": room for many snapshots waiting for Redis, so the flow surely goes on and commits barriers
    # past what Redis holds before it waits (with the default 2, on a loaded machine, it can wait first)
    run.start(in_flight=64 if when == "past" else None)
    run.wait_published(case.total // (4 if when == "past" else 2))
    held = run.progress()
    stall(own_redis)
    if when == "past":
        wait_for(lambda: run.recovered() > held or run._ended(), "the recovery store to move past Redis")
        assert not run._ended()
    run.kill()
    resume(own_redis)
    run.to_the_end()
    run.check()


@pytest.mark.parametrize("processes", [1, 2])
@pytest.mark.parametrize("flow", FLOWS)
def test_a_run_that_lost_redis_stops_and_its_restart_is_exact(flow, processes, cases, kafka_brokers, own_redis,
                                                               tmp_path, namespace):
    case = cases[flow]
    run = Run(case, kafka_brokers, own_redis, tmp_path, namespace, processes, ("--redis-retry-s", "1"))
    proc = run.start()
    run.wait_published(case.total // 4)
    stall(own_redis)
    _, err = proc.communicate(timeout=GUARD_S)
    resume(own_redis)
    assert proc.returncode == 1, err
    assert "lost Redis: Redis did not accept snapshot" in err and "for 1 s" in err, err
    assert "Traceback" not in err
    run.to_the_end()
    run.check()


@pytest.mark.parametrize("processes", [1, 2])
@pytest.mark.parametrize("flow", FLOWS)
def test_redis_restored_from_an_older_backup_while_the_flow_runs(flow, processes, cases, kafka_brokers, own_redis,
                                                                  tmp_path, namespace):
    """The flow is frozen mid-run while Redis goes back to an RDB saved earlier in the run, then
    goes on: the listener flow sends its whole count table again (Redis exact at the end of the
    same run); boards and activity stop with one line, and their restart brings Redis to exact."""
    case = cases[flow]
    run = Run(case, kafka_brokers, own_redis, tmp_path, namespace, processes)
    proc = run.start()
    run.wait_published(case.total // 5)
    save(own_redis, tmp_path / "backup.rdb")
    run.wait_published(case.total // 2)
    run.signal(signal.SIGSTOP)
    restored = restart_from(own_redis, tmp_path / "backup.rdb")
    run.signal(signal.SIGCONT)
    _, err = proc.communicate(timeout=GUARD_S)
    noticed = "restored from an older backup" in err
    if not noticed:
        # it had handed its last snapshot over before it was frozen (it reads this log in seconds), so it
        # published nothing after the restore: Redis went back after the run, as below, and its restart heals
        assert proc.returncode == 0, err
        run.to_the_end()
    elif flow == "listeners":
        assert proc.returncode == 0, err  # the whole count table sent again: healed in place
    else:
        assert proc.returncode == 1, err
        line = next(x for x in err.splitlines() if "Start the run again with the same --recovery-dir" in x)
        assert "restored from an older backup" in line
        assert "whole state" not in err, "it did not claim to send what it does not hold"
        assert "Traceback" not in err
        run.to_the_end()
    assert restored.running()
    run.check()


@pytest.mark.parametrize("processes", [1, 2])
@pytest.mark.parametrize("flow", FLOWS)
def test_redis_restored_from_an_older_backup_after_the_run(flow, processes, cases, kafka_brokers, own_redis, tmp_path,
                                                           namespace):
    """The run ended; Redis goes back to an RDB saved mid-run; the same run started again (nothing
    left to read) brings Redis back to exact."""
    case = cases[flow]
    run = Run(case, kafka_brokers, own_redis, tmp_path, namespace, processes)
    proc = run.start()
    run.wait_published(case.total // 3)
    save(own_redis, tmp_path / "backup.rdb")
    _, err = proc.communicate(timeout=GUARD_S)
    assert proc.returncode == 0, err
    restart_from(own_redis, tmp_path / "backup.rdb")
    assert 0 <= run.progress() < case.total, "the backup is older than the end of the run"
    run.to_the_end()
    run.check()
