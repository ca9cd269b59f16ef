"""``GET /livez`` and ``GET /readyz`` of ``rankflow serve``: the orchestrators' probes.

Liveness never asks Redis; readiness is Redis answering now and every mounted product
holding a usable snapshot. Served by the app on a Redis of the test's own, which the test
stops (SIGSTOP) and starts again."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from rankflow.api.app import Settings, create_app
from rankflow.options import RunOptions
from rankflow.runner import run
from rankflow.services import LocalRedis, free_port
from tests.events import ev

pytestmark = pytest.mark.redis  # own_redis


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[LocalRedis]:
    service = LocalRedis(free_port(), tmp_path / "redis").start()
    yield service
    pid = service.pid()
    if pid is not None:
        os.kill(pid, signal.SIGCONT)  # a test that failed while Redis was stopped
    service.stop()


def wait_for(api: TestClient, path: str, done: Callable[[Any], bool], what: str, timeout: float = 30) -> Any:
    """The first answer of ``path`` for which ``done(answer)`` holds."""
    deadline = time.monotonic() + timeout
    while True:
        answer = api.get(path)
        if done(answer):
            return answer
        assert time.monotonic() < deadline, f"{what}: still {answer.status_code} {answer.text}"
        time.sleep(0.02)


def publish_listeners(url: str, tmp_path: Path, namespace: str) -> int:
    plays = tmp_path / "plays.jsonl"
    plays.write_bytes(b"".join(ev(f"u{i}", f"p{i}", f"s{i}", "START", 1) + b"\n" for i in range(3)))
    final = run(RunOptions(input=f"jsonl:{plays}", until_eof=True, redis_url=url, namespace=namespace,
                           dead_letter=f"jsonl:{tmp_path / 'dead.jsonl'}", k_max=5))
    assert final is not None
    return int(final["snapshot_id"])


def test_readiness_follows_the_snapshot_and_redis(own_redis, tmp_path):
    settings = Settings(redis_url=own_redis.url, namespace="probes", poll_ms=20, products=("listeners",))
    with TestClient(create_app(settings)) as api:
        live = api.get("/livez")
        assert (live.status_code, live.json()) == (200, {"status": "live"})
        before = api.get("/readyz")
        assert before.status_code == 503, before.text
        assert before.json() == {
            "status": "not ready", "reason": "listeners: no usable ranking in namespace 'probes'", "redis": "ok",
            "products": {"listeners": "no usable ranking in namespace 'probes'"}}

        publish_listeners(own_redis.url, tmp_path, "probes")
        ready = wait_for(api, "/readyz", lambda r: r.status_code == 200, "ready once a flow published")
        assert ready.json() == {"status": "ready", "redis": "ok", "products": {"listeners": "ready"}}

        pid = own_redis.pid()
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            assert api.get("/livez").status_code == 200, "liveness asks Redis nothing"
            stopped = wait_for(api, "/readyz", lambda r: r.status_code == 503, "unready while Redis is stopped")
            body = stopped.json()
            assert body["status"] == "not ready" and body["redis"] == "unreachable", body
            assert body["reason"].startswith("cannot reach Redis"), body
            assert api.get("/livez").status_code == 200
        finally:
            os.kill(pid, signal.SIGCONT)
        again = wait_for(api, "/readyz", lambda r: r.status_code == 200, "ready again once Redis answers")
        assert again.json()["products"] == {"listeners": "ready"}


def test_every_mounted_product_must_have_a_snapshot(own_redis, tmp_path):
    """A product with nothing published makes the service unready (unlike /health, which another
    product's snapshot keeps ok): its reading routes answer 503."""
    publish_listeners(own_redis.url, tmp_path, "some")
    settings = Settings(redis_url=own_redis.url, namespace="some", poll_ms=20)  # every product
    with TestClient(create_app(settings)) as api:
        answer = wait_for(api, "/readyz", lambda r: r.json()["products"]["listeners"] == "ready" and "not read yet"
                          not in r.json()["products"].values(), "every product's reader to have looked")
        assert answer.status_code == 503
        body = answer.json()
        assert list(body["products"]) == ["listeners", "boards", "activity"]
        assert body["products"]["boards"].startswith("no usable boards snapshot in namespace 'some"), body
        assert body["products"]["activity"].startswith("no activity snapshot published yet"), body
        assert body["reason"] == "; ".join(f"{name}: {body['products'][name]}" for name in ("boards", "activity"))
        assert api.get("/health").status_code == 200, "/health: one product serving is enough"
        assert api.get("/boards/g/all/top").status_code == 503, "as the product's own routes"


def test_openapi_lists_the_probes():
    schema = create_app(Settings()).openapi()
    assert {"/livez", "/readyz", "/health"} <= set(schema["paths"])
    assert {"200", "503"} <= set(schema["paths"]["/readyz"]["get"]["responses"])
