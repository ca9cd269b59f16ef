"""Test services: a real Redis server started for the session, one namespace per test.

Each test is marked for the services it needs (``tests/markers.py``): ``make test-pure``
runs the others."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import pytest
import redis

import orjson

from rankflow.connectors.redis_generations import current_generation
from rankflow.connectors.redis_keys import Keys
from rankflow.connectors.redis_read import read_counts, read_history, read_latest
from rankflow.connectors.source_batch import ENDS, FAILED, STOP
from rankflow.options import RunOptions
from rankflow.runner import run
from rankflow.services import LocalRedis, LocalTansu, free_port
from tests import markers

_REFUSING_ROOT = Path(tempfile.mkdtemp(prefix="rankflow-refusing-"))  # the stand-ins of markers.guard


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    markers.mark_by_fixtures(items)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    with markers.guard(item, _REFUSING_ROOT):
        yield


def pytest_sessionfinish() -> None:
    shutil.rmtree(_REFUSING_ROOT, ignore_errors=True)


@pytest.fixture(autouse=True)
def _fresh_source_state() -> None:
    """Every test starts with the sources' process-wide state as a new process has it: a test
    that stops a followed run (``STOP.set()``) or reads a changed input must not end the next
    test's partitions, which xdist may run in the same process in any order."""
    STOP.clear()
    ENDS.clear()
    FAILED.clear()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    service = LocalRedis(free_port(), tmp_path_factory.mktemp("redis")).start()
    yield service.url
    service.stop()


@pytest.fixture(scope="session")
def kafka_brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Kafka-protocol broker (Tansu, in memory) for the whole session."""
    service = LocalTansu(free_port(), tmp_path_factory.mktemp("tansu")).start()
    yield service.url
    service.stop()


@pytest.fixture
def topic() -> str:
    return "events-" + uuid.uuid4().hex[:10]


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def namespace() -> str:
    return "t-" + uuid.uuid4().hex[:12]


class FlowRunner:
    """Runs the real flow in-process on a log and reads back what it published."""

    def __init__(self, redis_url: str, tmp: Path) -> None:
        self.redis_url = redis_url
        self.tmp = tmp
        self.runs = 0

    def write_log(self, lines: list[bytes], name: str = "events.jsonl") -> str:
        path = self.tmp / name
        path.write_bytes(b"".join(line + b"\n" for line in lines))
        return str(path)

    def run(self, path: str, **options: Any) -> dict[str, Any]:
        self.runs += 1
        namespace = options.pop("namespace", f"flow-{uuid.uuid4().hex[:12]}")
        dead = options.pop("dead_letter", f"jsonl:{self.tmp / f'dead-{self.runs}.jsonl'}")
        source = options.pop("input", f"jsonl:{path}")
        opts = RunOptions(input=source, until_eof=True, redis_url=self.redis_url,
                          namespace=namespace, dead_letter=dead, **options)
        final = run(opts)
        assert final is not None, "the run published no snapshot"
        client = redis.Redis.from_url(self.redis_url)
        try:
            history = read_history(client, namespace)
            counts = read_counts(client, namespace)
            tables = count_tables(client, namespace)
            assert read_latest(client, namespace) == final
        finally:
            client.close()
        dead_path = dead.split(":", 1)[1]
        dead_lines = Path(dead_path).read_bytes().splitlines() if os.path.exists(dead_path) else []
        return {"final": final, "history": history, "dead_letters": dead_lines, "namespace": namespace,
                "counts": counts, "tables": tables}


def run_line_by_line(flow: FlowRunner, lines: list[bytes], **options: Any) -> dict[str, Any]:
    """Run the flow following a file, appending one line per published snapshot.

    Each line then lands in a barrier of its own, whatever the machine's speed: the
    way to make a test about what happens *between* snapshots deterministic.
    """
    path = flow.write_log([])
    namespace = f"flow-{uuid.uuid4().hex[:12]}"
    opts = RunOptions(input=f"jsonl:{path}", redis_url=flow.redis_url, namespace=namespace,
                      dead_letter=f"jsonl:{flow.tmp / 'dead-stepwise.jsonl'}", **options)
    failure: list[BaseException] = []

    def follow() -> None:
        try:
            run(opts)
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            failure.append(exc)

    thread = threading.Thread(target=follow, name="flow")
    thread.start()
    client = redis.Redis.from_url(flow.redis_url)
    try:
        with open(path, "ab") as out:
            for n, line in enumerate(lines, start=1):
                out.write(line + b"\n")
                out.flush()
                deadline = time.monotonic() + 60
                while (snap := read_latest(client, namespace)) is None or snap["positions"][path] < n:
                    assert not failure and time.monotonic() < deadline, f"line {n} was never published: {failure}"
                    time.sleep(0.005)
    finally:
        STOP.set()
        thread.join(timeout=60)
    try:
        assert not failure, failure
        return {"path": path, "history": read_history(client, namespace), "tables": count_tables(client, namespace),
                "counts": read_counts(client, namespace)}
    finally:
        client.close()


def count_tables(client: redis.Redis, namespace: str) -> dict[int, dict[str, int]]:
    """The full count table as of every published snapshot, rebuilt from the ``changes`` stream
    the way a reader keeps its copy: a ``full`` entry starts over, the others add changes."""
    table: dict[str, int] = {}
    tables: dict[int, dict[str, int]] = {}
    changes = Keys(namespace, current_generation(client, namespace)).changes
    for _, entry in client.xrange(changes):
        if entry[b"full"] == b"full":
            table = {}
        for song, count in orjson.loads(entry[b"counts"]).items():
            if count:
                table[song] = count
            else:
                table.pop(song, None)
        tables[int(entry[b"snapshot_id"])] = dict(table)
    return tables


@pytest.fixture
def flow(redis_url: str, tmp_path: Path) -> FlowRunner:
    return FlowRunner(redis_url, tmp_path)
