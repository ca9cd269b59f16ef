"""``GET /health`` and ``GET /metrics`` of ``rankflow serve``: each product's background readers
say what they know, and the body (its fields and their order) is the one clients read.

The bodies are written out whole: what each product contributes, where, and how it decides
the status (a listener snapshot that is stale degrades; a product with nothing published
does not, as long as another product has a snapshot)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from fastapi.testclient import TestClient

from rankflow.api.app import Settings, create_app
from rankflow.options import RunOptions
from rankflow.runner import run
from rankflow.services import free_port
from tests import boards_example as example
from tests.events import ev
from tests.test_activity_flow import line, run_activity


@pytest.fixture(scope="module")
def published(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One namespace holding all three products, and each one's final snapshot id."""
    tmp = tmp_path_factory.mktemp("health")
    out = run_activity(redis_url, tmp, [line("A", f"c{i}", f"u{i}", 1_800_000_000_000 + i) for i in range(5)],
                       k_max=5)
    namespace = out["namespace"]
    scores = tmp / "scores.jsonl"
    scores.write_bytes(b"".join(x + b"\n" for x in example.LINES))
    boards = run(RunOptions(input=f"jsonl:{scores}", until_eof=True, redis_url=redis_url, namespace=namespace,
                            dead_letter=f"jsonl:{tmp / 'dead-b.jsonl'}", flow="boards", signing_key=example.KEY))
    plays = tmp / "plays.jsonl"
    plays.write_bytes(b"".join(ev(f"u{i}", f"p{i}", f"s{i}", "START", 1) + b"\n" for i in range(3)))
    listeners = run(RunOptions(input=f"jsonl:{plays}", until_eof=True, redis_url=redis_url, namespace=namespace,
                               dead_letter=f"jsonl:{tmp / 'dead-l.jsonl'}", k_max=5))
    assert boards is not None and listeners is not None
    return {"namespace": namespace, "activity": out["final"]["snapshot_id"], "boards": boards["snapshot_id"],
            "listeners": listeners["snapshot_id"]}


@contextmanager
def serving(settings: Settings, ready: Any = lambda body: True) -> Iterator[TestClient]:
    """The app on ``settings`` once ``ready(/health's body)`` holds (its readers poll in the background)."""
    with TestClient(create_app(settings)) as client:
        deadline = time.monotonic() + 20
        while not ready(client.get("/health").json()):
            assert time.monotonic() < deadline, client.get("/health").json()
            time.sleep(0.01)
        yield client


def everything_read(body: dict[str, Any]) -> bool:
    mirror = body.get("board_mirror", {"ready": True})
    return body["snapshot_id"] is not None and body["boards_snapshot_id"] is not None \
        and body["activity_snapshot_id"] is not None and mirror["ready"]


@pytest.mark.parametrize("index", ["redis", "memory"])
def test_health_of_every_product(redis_url, published, index):
    settings = Settings(redis_url=redis_url, namespace=published["namespace"], poll_ms=20, board_index=index)
    with serving(settings, everything_read) as api:
        r = api.get("/health")
        body = r.json()
        assert r.status_code == 200
        age = body["snapshot_age_ms"]
        assert isinstance(age, int) and age >= 0
        expected = {"status": "ok", "redis": "ok", "snapshot_id": published["listeners"], "snapshot_age_ms": age,
                    "problem": None, "boards_snapshot_id": published["boards"], "board_index": index,
                    "activity_snapshot_id": published["activity"]}
        if index == "memory":
            expected["board_mirror"] = {"ready": True, "problem": None, "snapshot_id": published["boards"]}
        assert list(body.items()) == list(expected.items())


def test_health_of_an_empty_namespace_is_degraded(redis_url):
    namespace = f"h-{uuid.uuid4().hex[:10]}"
    with serving(Settings(redis_url=redis_url, namespace=namespace, poll_ms=20)) as api:
        r = api.get("/health")
        assert r.status_code == 503
        assert list(r.json().items()) == [
            ("status", "degraded"), ("redis", "ok"), ("snapshot_id", None), ("snapshot_age_ms", None),
            ("problem", f"no usable ranking in namespace {namespace!r}"), ("boards_snapshot_id", None),
            ("board_index", "redis"), ("activity_snapshot_id", None)]


def test_health_without_redis(tmp_path):
    with serving(Settings(redis_url=f"redis://127.0.0.1:{free_port()}/0", poll_ms=20, board_index="memory")) as api:
        r = api.get("/health")
        body = r.json()
        assert r.status_code == 503
        assert list(body) == ["status", "redis", "snapshot_id", "snapshot_age_ms", "problem", "boards_snapshot_id",
                              "board_index", "activity_snapshot_id", "board_mirror"]
        assert body["status"] == "degraded" and body["redis"] == "unreachable" and body["snapshot_id"] is None
        assert body["problem"].startswith("cannot reach Redis")
        assert body["boards_snapshot_id"] is None and body["activity_snapshot_id"] is None
        assert body["board_mirror"]["ready"] is False and body["board_mirror"]["snapshot_id"] is None


def test_metrics_of_every_product(redis_url, published):
    settings = Settings(redis_url=redis_url, namespace=published["namespace"], poll_ms=20, board_index="memory")
    with serving(settings, everything_read) as api:
        text = api.get("/metrics").text
        own = [x for x in text.splitlines() if x.startswith(("rankflow_api_table", "rankflow_api_board"))]
        assert own == ["rankflow_api_table_loads_total 1", "rankflow_api_table_songs 3",
                       "rankflow_api_board_loads_total 1", f"rankflow_api_board_entries {own[3].split()[1]}"]
        assert int(own[3].split()[1]) > 0
        assert text.index("rankflow_api_requests") < text.index("rankflow_api_table_loads_total")


def test_a_product_not_mounted_is_not_read(redis_url, published):
    """``serve --products boards``: only the boards' parts run, and /health reports them alone
    (no listener snapshot to find stale, no activity watcher polling)."""
    settings = Settings(redis_url=redis_url, namespace=published["namespace"], poll_ms=20, products=("boards",))
    with serving(settings, lambda body: body["boards_snapshot_id"] is not None) as api:
        r = api.get("/health")
        assert r.status_code == 200
        assert list(r.json().items()) == [("status", "ok"), ("redis", "ok"),
                                          ("boards_snapshot_id", published["boards"]), ("board_index", "redis")]
        state = api.app.state
        assert not hasattr(state, "cache") and not hasattr(state, "activity_watch")
        assert "rankflow_api_table" not in api.get("/metrics").text


def test_nothing_published_for_the_products_mounted_is_degraded(redis_url, published):
    """The listener ranking alone mounted, in a namespace that holds only the others' snapshots."""
    namespace = f"h-{uuid.uuid4().hex[:10]}"
    with serving(Settings(redis_url=redis_url, namespace=namespace, poll_ms=20, products=("activity",))) as api:
        r = api.get("/health")
        assert r.status_code == 503
        assert r.json() == {"status": "degraded", "redis": "ok", "activity_snapshot_id": None}
