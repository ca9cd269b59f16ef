"""The service follows the flows' announcements (``api.announce``), not its poll interval.

Every reader here polls once in ten minutes: a snapshot they show within the test's
bounds reached them by its announcement.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from rankflow.api.app import Settings, create_app
from rankflow.connectors.redis_generations import join_run
from rankflow.connectors.redis_keys import Keys
from rankflow.connectors.redis_listeners import CountTable
from rankflow.connectors.redis_publish import Publisher
from rankflow.options import RunOptions
from rankflow.runner import run
from rankflow.state.snapshot import Snapshot, snapshot_id
from tests import boards_example as example
from tests.activity.test_activity_flow import line, run_activity
from tests.events import ev

NEVER_MS = 600_000
"""A poll interval no test outlasts."""


def until(condition: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)
    return value


def publish_all(redis_url: str, tmp: Path, namespace: str, n: int) -> dict[str, int]:
    """One more run of each product's flow into ``namespace``; each one's final snapshot id."""
    tag = uuid.uuid4().hex[:6]
    activity = run_activity(redis_url, tmp, [line("A", f"c{i}", f"u{i}", 1_800_000_000_000 + i) for i in range(n)],
                            k_max=5, namespace=namespace)
    scores = tmp / f"scores-{tag}.jsonl"
    scores.write_bytes(b"".join(x + b"\n" for x in example.LINES[:n]))
    boards = run(RunOptions(input=f"jsonl:{scores}", until_eof=True, redis_url=redis_url, namespace=namespace,
                            dead_letter=f"jsonl:{tmp / 'dead-b.jsonl'}", flow="boards", signing_key=example.KEY))
    plays = tmp / f"plays-{tag}.jsonl"
    plays.write_bytes(b"".join(ev(f"u{i}", f"p{i}", f"s{i}", "START", 1) + b"\n" for i in range(n)))
    listeners = run(RunOptions(input=f"jsonl:{plays}", until_eof=True, redis_url=redis_url, namespace=namespace,
                               dead_letter=f"jsonl:{tmp / 'dead-l.jsonl'}", k_max=5))
    assert boards is not None and listeners is not None
    return {"activity": activity["final"]["snapshot_id"], "boards": boards["snapshot_id"],
            "listeners": listeners["snapshot_id"]}


def shown(health: dict[str, Any]) -> dict[str, Any]:
    """The snapshot ids ``/health`` reports per product (the memory index's too, when there is one)."""
    ids = {"activity": health["activity_snapshot_id"], "boards": health["boards_snapshot_id"],
           "listeners": health["snapshot_id"]}
    if "board_mirror" in health:
        ids["mirror"] = health["board_mirror"]["snapshot_id"]
    return ids


@pytest.mark.parametrize("index", ["redis", "memory"])
def test_every_reader_follows_announced_publishes(redis_url, tmp_path, namespace, index):
    settings = Settings(redis_url=redis_url, namespace=namespace, poll_ms=NEVER_MS, board_index=index)
    with TestClient(create_app(settings)) as api:
        announcements = api.app.state.announcements
        until(lambda: announcements.subscribed)
        assert len(announcements.channels()) == 3, "one channel per product"
        for n in (3, 5):  # the second round can only arrive announced: the readers' first looks are over
            ids = publish_all(redis_url, tmp_path, namespace, n)
            want = {**ids, "mirror": ids["boards"]} if index == "memory" else ids
            until(lambda want=want: shown(api.get("/health").json()) == want)
        assert api.get("/boards/g1/all/top").json()["snapshot_id"] == ids["boards"]
        assert api.get("/rankings?k=5").json()["snapshot_id"] == ids["listeners"]
        assert announcements.heard >= 6


def _snapshot(token: int, epoch: int, counts: dict[str, int]) -> Snapshot:
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    total = sum(counts.values())
    return Snapshot(snapshot_id(token, epoch), token, epoch, {"f": epoch}, total, total, len(items), 0, 10,
                    items, {}, [], [], counts, True)


def test_a_lost_subscription_is_made_again_and_its_readers_look(redis_client, redis_url, namespace):
    token = join_run(redis_client, namespace, uuid.uuid4().hex)[0]
    publisher = Publisher(redis_url, namespace, token, state=CountTable())
    settings = Settings(redis_url=redis_url, namespace=namespace, poll_ms=NEVER_MS, products=("listeners",))
    with TestClient(create_app(settings)) as api:
        announcements = api.app.state.announcements
        until(lambda: announcements.subscribed)
        assert publisher.publish(_snapshot(token, 1, {"a": 1})) == 1
        until(lambda: api.get("/rankings?k=5").json().get("snapshot_id") == snapshot_id(token, 1))
        channel = Keys(namespace).generation
        redis_client.client_kill_filter(_type="pubsub")  # every subscriber of this Redis: theirs come back too
        until(lambda: not announcements.subscribed)
        assert publisher.publish(_snapshot(token, 2, {"b": 2})) == 1  # announced to nobody
        until(lambda: announcements.subscribed and redis_client.pubsub_numsub(channel)[0][1] >= 1)
        until(lambda: api.get("/rankings?k=5").json()["snapshot_id"] == snapshot_id(token, 2))  # looked at subscribing


def test_a_user_without_the_channels_is_served_by_polling(redis_client, redis_url, namespace, caplog):
    user = f"reader-{uuid.uuid4().hex[:8]}"
    redis_client.acl_setuser(user, enabled=True, passwords=["+secret"], keys=["*"], commands=["+@all"],
                             reset_channels=True)
    try:
        token = join_run(redis_client, namespace, uuid.uuid4().hex)[0]
        publisher = Publisher(redis_url, namespace, token, state=CountTable())
        url = redis_url.replace("redis://", f"redis://{user}:secret@")
        settings = Settings(redis_url=url, namespace=namespace, poll_ms=20, products=("listeners",))
        with caplog.at_level(logging.WARNING, logger="rankflow.api"), TestClient(create_app(settings)) as api:
            announcements = api.app.state.announcements
            until(lambda: announcements.problem is not None)
            assert "NoPermission" in announcements.problem and not announcements.subscribed
            assert publisher.publish(_snapshot(token, 1, {"a": 1})) == 1
            until(lambda: api.get("/rankings?k=5").json().get("snapshot_id") == snapshot_id(token, 1))
        assert [r.message for r in caplog.records].count(
            next(r.message for r in caplog.records if "cannot subscribe" in r.message)) == 1, "logged once"
    finally:
        redis_client.acl_deluser(user)
