"""Test services: a real Redis server started for the session, one namespace per test."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
import redis

from rankflow.connectors.redis_read import read_counts, read_history, read_latest
from rankflow.runner import RunOptions, run
from rankflow.services import LocalRedis, LocalTansu, free_port


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
        opts = RunOptions(input=f"jsonl:{path}", until_eof=True, redis_url=self.redis_url,
                          namespace=namespace, dead_letter=dead, **options)
        final = run(opts)
        assert final is not None, "the run published no snapshot"
        client = redis.Redis.from_url(self.redis_url)
        try:
            history = read_history(client, namespace)
            counts = read_counts(client, namespace)
            assert read_latest(client, namespace) == final
        finally:
            client.close()
        dead_path = dead.split(":", 1)[1]
        dead_lines = Path(dead_path).read_bytes().splitlines() if os.path.exists(dead_path) else []
        return {"final": final, "history": history, "dead_letters": dead_lines, "namespace": namespace,
                "counts": counts}


@pytest.fixture
def flow(redis_url: str, tmp_path: Path) -> FlowRunner:
    return FlowRunner(redis_url, tmp_path)
