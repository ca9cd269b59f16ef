"""The publish script: ids only grow, stale runs are fenced, readers see whole snapshots."""

from __future__ import annotations

import pytest

from connectors.redis_snapshots import FencedError, Publisher, acquire_run_token, read_history, read_latest
from state.snapshot import Snapshot, snapshot_id


def snap(run: int, epoch: int, items=(("a", 2),)) -> Snapshot:
    total = sum(c for _, c in items)
    return Snapshot(snapshot_id(run, epoch), run, epoch, {"f": epoch}, total, total, len(items), 0, 10,
                    list(items), {}, [])


def test_ids_only_grow(redis_client, redis_url, namespace):
    token = acquire_run_token(redis_client, namespace)
    pub = Publisher(redis_url, namespace, token)
    assert pub.publish(snap(token, 5))
    assert not pub.publish(snap(token, 5))  # a retry of the same snapshot
    assert not pub.publish(snap(token, 3, items=(("old", 1),)))  # an older one
    assert read_latest(redis_client, namespace)["epoch"] == 5
    assert pub.publish(snap(token, 6))
    assert [s["epoch"] for s in read_history(redis_client, namespace)] == [5, 6]


def test_a_newer_run_fences_the_older(redis_client, redis_url, namespace):
    old_token = acquire_run_token(redis_client, namespace)
    old = Publisher(redis_url, namespace, old_token)
    assert old.publish(snap(old_token, 100))
    new_token = acquire_run_token(redis_client, namespace)
    new = Publisher(redis_url, namespace, new_token)
    assert new.publish(snap(new_token, 1))  # a new run's first snapshot is newer than any of the old run's
    with pytest.raises(FencedError, match=f"current owner is run {new_token}"):
        old.publish(snap(old_token, 101))
    assert read_latest(redis_client, namespace)["run"] == new_token


def test_snapshot_ids_grow_across_runs():
    assert snapshot_id(2, 1) > snapshot_id(1, 999_999_999)
    with pytest.raises(ValueError):
        snapshot_id(1, 0)
