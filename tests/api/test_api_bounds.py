"""Every count parameter (k, n, r) of every product is checked before Redis does any work for
it: a k beyond K_max, or beyond 64 bits, is a ``400 {"error"}`` and runs no script (Redis's
own command counters say so), and a parameter FastAPI cannot read is the same ``400`` on
every route, never a ``422``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from rankflow.api.app import Settings, create_app
from rankflow.connectors.activity_read import ActivityReader
from rankflow.connectors.board_read import MAX_N, MAX_R
from rankflow.options import RunOptions
from rankflow.runner import run
from tests import boards_example as example
from tests.events import ev
from tests.activity.test_activity_flow import line, run_activity

K_MAX = 5
HUGE = [K_MAX + 1, 1_000_000, 2**63 - 1, 2**63, 10**30]
SCRIPTS = ("evalsha", "eval", "eval_ro", "evalsha_ro", "fcall", "fcall_ro")
READS = ("zrevrange", "zrange", "zrangebyscore", "zrevrangebyscore")


@pytest.fixture(scope="module")
def published(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """One namespace holding all three products: listeners, boards, activity."""
    tmp = tmp_path_factory.mktemp("bounds")
    out = run_activity(redis_url, tmp, [line("A", f"c{i}", f"u{i}", 1_800_000_000_000 + i) for i in range(50)],
                       k_max=K_MAX)
    namespace = out["namespace"]
    scores = tmp / "scores.jsonl"
    scores.write_bytes(b"".join(x + b"\n" for x in example.LINES))
    assert run(RunOptions(input=f"jsonl:{scores}", until_eof=True, redis_url=redis_url, namespace=namespace,
                          dead_letter=f"jsonl:{tmp / 'dead-b.jsonl'}", flow="boards", signing_key=example.KEY))
    plays = tmp / "plays.jsonl"
    plays.write_bytes(b"".join(ev(f"u{i}", f"p{i}", f"s{i}", "START", 1) + b"\n" for i in range(10)))
    assert run(RunOptions(input=f"jsonl:{plays}", until_eof=True, redis_url=redis_url, namespace=namespace,
                          dead_letter=f"jsonl:{tmp / 'dead-l.jsonl'}", k_max=K_MAX))
    return namespace


@pytest.fixture(scope="module")
def api(redis_url: str, published: str) -> Iterator[TestClient]:
    """The service with its watchers polling once, at start: afterwards every script Redis
    runs is one a request asked for."""
    with TestClient(create_app(Settings(redis_url=redis_url, namespace=published, poll_ms=600_000))) as client:
        state = client.app.state
        deadline = time.monotonic() + 20
        while state.activity_watch.version is None or state.cache.snapshot is None or state.board_watch.version is None:
            assert time.monotonic() < deadline, "the service never read the snapshots"
            time.sleep(0.01)
        yield client


def calls(client: redis.Redis, commands: tuple[str, ...]) -> int:
    stats = client.info("commandstats")
    return sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in commands)


ROUTES = [("/activity/A/top", "k"), ("/activity/top?workspace=A", "k"), ("/activity/global/top", "k"),
          ("/boards/g1/all/top", "n"), ("/boards/g1/all/players/ana/around", "r"), ("/rankings", "k"),
          ("/rankings/recent", "k"), ("/rankings/stream", "k")]
VALID = {"k": range(1, K_MAX + 1), "n": range(1, MAX_N + 1), "r": range(MAX_R + 1)}


def with_param(route: str, name: str, value: Any) -> str:
    return f"{route}{'&' if '?' in route else '?'}{name}={value}"


def test_counts_out_of_range_are_400_and_run_no_script(api, redis_client):
    assert api.get("/activity/A/top", params={"k": K_MAX}).status_code == 200
    before = calls(redis_client, SCRIPTS)
    assert api.get("/activity/A/top", params={"k": 1}).status_code == 200
    assert calls(redis_client, SCRIPTS) > before, "the counters see a query's script"
    for route, name in ROUTES:
        for value in [*HUGE, 0, -1, -(2**64)]:
            if value in VALID[name]:
                continue
            before = calls(redis_client, SCRIPTS)
            r = api.get(with_param(route, name, value))
            assert r.status_code == 400 and f"{name} must be between" in r.json()["error"], (route, value, r.text)
            assert calls(redis_client, SCRIPTS) == before, f"{route} ran a script for {name}={value}"


def test_a_reader_without_a_snapshot_learns_k_max_before_reading_channels(redis_client, published):
    reader = ActivityReader(redis_client, published)
    for k in HUGE:
        before = calls(redis_client, READS)
        with pytest.raises(ValueError, match="k must be between 1 and K_max"):
            ActivityReader(redis_client, published).top("A", k)  # a fresh one: nothing held
        assert calls(redis_client, READS) == before, f"k={k} read channels"
    assert len(reader.top("A", K_MAX)["items"]) == K_MAX


def test_a_parameter_that_is_not_a_count_is_the_same_400_everywhere(api):
    for route, name in ROUTES:
        for value in ("ten", "1.5", "", "1e3", "9" * 5000):
            r = api.get(with_param(route, name, value))
            assert r.status_code == 400, (route, value, r.status_code, r.text[:200])
            assert set(r.json()) == {"error"} and r.json()["error"].startswith(f"{name}: "), (route, value, r.text)
    paths = api.get("/openapi.json").json()["paths"]
    for path in ("/rankings", "/rankings/recent", "/rankings/stream", "/songs/{song_id}", "/matches/{match_id}/result"):
        assert "422" not in next(iter(paths[path].values()))["responses"], path
