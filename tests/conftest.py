"""Test services: a real Redis server started for the session, one namespace per test."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
import redis

from connectors.redis_snapshots import read_history, read_latest
from rankflow.runner import RunOptions, run


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed: run `make setup` (apt-get install redis-server)")
    port = free_port()
    workdir = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(workdir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError(f"redis-server did not start on port {port}")
            time.sleep(0.05)
    client.close()
    yield url
    proc.terminate()
    proc.wait(timeout=10)


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
            assert read_latest(client, namespace) == final
        finally:
            client.close()
        dead_path = dead.split(":", 1)[1]
        dead_lines = Path(dead_path).read_bytes().splitlines() if os.path.exists(dead_path) else []
        return {"final": final, "history": history, "dead_letters": dead_lines, "namespace": namespace}


@pytest.fixture
def flow(redis_url: str, tmp_path: Path) -> FlowRunner:
    return FlowRunner(redis_url, tmp_path)
