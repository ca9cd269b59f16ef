"""The publish script: ids only grow, positions never go back, stale runs are fenced,
a rebuild's switch is atomic, and a Redis that lost its data is re-established."""

from __future__ import annotations

import time
import uuid

import pytest
import redis

from rankflow.connectors.redis_generations import (
    FencedError,
    GenerationSwitched,
    RunAlreadyPublished,
    claim_generation,
    join_run,
    new_run_token,
    switch_generation,
)
from rankflow.connectors.redis_keys import Keys
from rankflow.connectors.redis_listeners import CountTable
from rankflow.connectors.redis_publish import Publisher
from rankflow.connectors.redis_read import read_counts, read_history, read_latest
from rankflow.connectors.redis_scripts import Published
from rankflow.state.snapshot import Snapshot, snapshot_id


def snap(run: int, epoch: int, position: int | None = None, items=(("a", 2),), counts=None,
         full: bool = False) -> Snapshot:
    total = sum(c for _, c in items)
    return Snapshot(snapshot_id(run, epoch), run, epoch, {"f": epoch if position is None else position},
                    total, total, len(items), 0, 10, list(items), {}, [], [], counts or {}, full)


def test_ids_only_grow(redis_client, redis_url, namespace):
    token = join_run(redis_client, namespace, uuid.uuid4().hex)[0]
    pub = Publisher(redis_url, namespace, token, state=CountTable())
    assert pub.publish(snap(token, 5)) == 1
    assert pub.publish(snap(token, 5)) == Published.ALREADY_STORED  # a retry of the same snapshot
    assert pub.publish(snap(token, 3, items=(("old", 1),))) == Published.OLDER
    assert read_latest(redis_client, namespace)["epoch"] == 5
    assert pub.publish(snap(token, 6)) == 1
    assert [s["epoch"] for s in read_history(redis_client, namespace)] == [5, 6]


def test_positions_never_go_back(redis_client, redis_url, namespace):
    first = join_run(redis_client, namespace, uuid.uuid4().hex)[0]
    assert Publisher(redis_url, namespace, first, state=CountTable()).publish(snap(first, 9, position=900)) == 1
    restarted = join_run(redis_client, namespace, uuid.uuid4().hex)[0]  # e.g. resumed from an older barrier
    pub = Publisher(redis_url, namespace, restarted, state=CountTable())
    assert pub.publish(snap(restarted, 7, position=700)) == -1
    assert read_latest(redis_client, namespace)["positions"] == {"f": 900}
    assert pub.publish(snap(restarted, 8, position=900)) == 1  # caught up
    assert read_latest(redis_client, namespace)["run"] == restarted


def test_a_newer_run_fences_the_older(redis_client, redis_url, namespace):
    old_token = join_run(redis_client, namespace, uuid.uuid4().hex)[0]
    old = Publisher(redis_url, namespace, old_token, state=CountTable())
    assert old.publish(snap(old_token, 100)) == 1
    new_token = join_run(redis_client, namespace, uuid.uuid4().hex)[0]
    new = Publisher(redis_url, namespace, new_token, state=CountTable())
    with pytest.raises(FencedError, match=f"current owner is run {new_token}"):
        old.publish(snap(old_token, 101))
    assert new.publish(snap(new_token, 101)) == 1
    assert read_latest(redis_client, namespace)["run"] == new_token


def test_rebuild_generation_is_invisible_until_the_switch(redis_client, redis_url, namespace):
    live_token = join_run(redis_client, namespace, uuid.uuid4().hex)[0]
    live = Publisher(redis_url, namespace, live_token, state=CountTable())
    assert live.publish(snap(live_token, 1, items=(("live", 1),))) == 1
    build_token = new_run_token(redis_client, namespace)
    claim_generation(redis_client, namespace, build_token, build_token)
    build = Publisher(redis_url, namespace, build_token, generation=build_token, live=False, state=CountTable())
    assert build.publish(snap(build_token, 50, items=(("rebuilt", 3),))) == 1
    assert live.publish(snap(live_token, 2, items=(("live", 2),))) == 1  # the live run goes on meanwhile
    assert read_latest(redis_client, namespace)["items"][0]["song_id"] == "live"
    switch_generation(redis_client, namespace, 0, build_token)
    assert read_latest(redis_client, namespace)["items"][0]["song_id"] == "rebuilt"
    assert redis_client.exists(*Keys(namespace, 0).generation_keys()) == 0, "old generation removed"
    with pytest.raises(GenerationSwitched):
        live.publish(snap(live_token, 3))
    with pytest.raises(GenerationSwitched):
        switch_generation(redis_client, namespace, 0, 99)  # a second switch from a stale view


def test_redis_losing_its_data_is_repaired_by_the_next_publish(redis_client, redis_url, namespace):
    token = join_run(redis_client, namespace, uuid.uuid4().hex)[0]
    pub = Publisher(redis_url, namespace, token, state=CountTable())
    assert pub.publish(snap(token, 1)) == 1
    redis_client.delete(*redis_client.keys(f"{{{namespace}}}:*"))  # Redis lost this namespace
    assert read_latest(redis_client, namespace) is None
    assert pub.publish(snap(token, 2)) == 1
    assert read_latest(redis_client, namespace)["epoch"] == 2


def test_a_run_started_after_redis_lost_everything_takes_over(redis_client, redis_url, namespace):
    """The run-token counter is lost with the data: the live run's next publish restores
    it, so a later run still gets a newer token (before, it was fenced for good)."""
    for _ in range(3):
        join_run(redis_client, namespace, uuid.uuid4().hex)
    old_token = join_run(redis_client, namespace, uuid.uuid4().hex)[0]
    old = Publisher(redis_url, namespace, old_token, state=CountTable())
    assert old.publish(snap(old_token, 1)) == 1
    redis_client.delete(*redis_client.keys(f"{{{namespace}}}:*"))  # Redis lost everything
    assert old.publish(snap(old_token, 2)) == 1  # the live run goes on
    new_token = join_run(redis_client, namespace, uuid.uuid4().hex, fresh=True)[0]  # a run starting over
    assert new_token > old_token
    assert Publisher(redis_url, namespace, new_token, state=CountTable()).publish(snap(new_token, 1)) == 1
    with pytest.raises(FencedError):
        old.publish(snap(old_token, 3))


def test_the_full_count_table_follows_changes_and_survives_redis_loss(redis_client, redis_url, namespace):
    token = join_run(redis_client, namespace, uuid.uuid4().hex)[0]
    pub = Publisher(redis_url, namespace, token, state=CountTable())
    assert pub.publish(snap(token, 1, counts={"a": 2, "b": 1, "c": 1}, full=True)) == 1
    assert pub.publish(snap(token, 2, counts={"b": 0, "c": 4})) == 1
    assert read_counts(redis_client, namespace) == {"a": 2, "c": 4}
    assert pub.publish(snap(token, 1, counts={"a": 9})) == Published.OLDER  # not stored: its change waits...
    assert read_counts(redis_client, namespace) == {"a": 2, "c": 4}
    assert pub.publish(snap(token, 3, counts={"d": 1})) == 1  # ...and goes with the next snapshot stored
    assert read_counts(redis_client, namespace) == {"a": 9, "c": 4, "d": 1}
    redis_client.delete(*redis_client.keys(f"{{{namespace}}}:*"))  # Redis lost its data
    assert pub.publish(snap(token, 4, counts={"a": 3})) == 1
    assert read_counts(redis_client, namespace) == {"a": 3, "c": 4, "d": 1}, "the whole table is back"


def test_a_resumed_run_keeps_its_changes_until_redis_stores_a_snapshot(redis_client, redis_url, namespace):
    """A run resumed from recovery state with its old token replays epochs Redis has
    ids for, under other cuts of the input: their changes, the first of them the whole
    table, must reach Redis with the first snapshot it stores."""
    token = join_run(redis_client, namespace, uuid.uuid4().hex)[0]
    before = Publisher(redis_url, namespace, token, state=CountTable())
    assert before.publish(snap(token, 1, counts={"a": 2, "b": 1}, full=True)) == 1
    assert before.publish(snap(token, 3, counts={"b": 0, "c": 4})) == 1  # the table at line 3: a 2, c 4
    resumed = Publisher(redis_url, namespace, token, state=CountTable())
    assert resumed.publish(snap(token, 2, position=2, counts={"a": 2, "b": 1}, full=True)) == Published.OLDER
    assert resumed.publish(snap(token, 3, position=4, counts={"b": 0, "c": 4, "e": 1})) == Published.OLDER
    assert read_counts(redis_client, namespace) == {"a": 2, "c": 4}, "the stored snapshot's table"
    assert resumed.publish(snap(token, 4, position=5, counts={"a": 0})) == 1
    assert read_counts(redis_client, namespace) == {"c": 4, "e": 1}, "the table at line 5"


def test_a_process_starting_over_cannot_rejoin_a_run_that_published(redis_client, redis_url, namespace):
    run_id = uuid.uuid4().hex
    token = join_run(redis_client, namespace, run_id, fresh=True)[0]
    assert join_run(redis_client, namespace, run_id, fresh=True)[0] == token, "its second process"
    assert Publisher(redis_url, namespace, token, state=CountTable()).publish(snap(token, 1)) == 1
    with pytest.raises(RunAlreadyPublished, match=f"run id '{run_id}' belongs to run {token}.*new --run-id"):
        join_run(redis_client, namespace, run_id, fresh=True)
    assert join_run(redis_client, namespace, run_id, fresh=False)[0] == token, "a process resuming its state"


def test_snapshot_ids_grow_across_runs():
    assert snapshot_id(2, 1) > snapshot_id(1, 999_999_999)
    with pytest.raises(ValueError):
        snapshot_id(1, 0)


def test_a_run_fenced_at_its_last_snapshot_stops_with_the_error(tmp_path, redis_url, redis_client, namespace):
    """Snapshots are published from a thread: an error at the very last one still ends
    the run with that error (raised at the sink's close), not silently or by an abort."""
    from rankflow.connectors.jsonl import JsonlDeadLetterSink, JsonlSource
    from rankflow.connectors.redis_publish import RedisSnapshotSink
    from rankflow.execution import execute
    from rankflow.flows.listeners import build_flow
    from rankflow.options import RunOptions
    from tests.events import ev

    log = tmp_path / "one.jsonl"
    log.write_bytes(ev("u1", "p1", "song", "START", 1) + b"\n")
    claim_generation(redis_client, namespace, 0, 50)  # a newer run owns the namespace
    flow = build_flow(JsonlSource([str(log)]), JsonlDeadLetterSink(str(tmp_path / "dead.jsonl")),
                      RedisSnapshotSink(redis_url, namespace, 7, state=CountTable), song_partitions=2, k_max=10, run_token=7,
                      user_shards=4)
    with pytest.raises(FencedError, match="current owner is run 50"):
        execute(flow, RunOptions(input=f"jsonl:{log}", until_eof=True), None)
    assert read_latest(redis_client, namespace) is None


def _announced(pubsub, n: int) -> list[bytes]:
    """The next ``n`` messages of ``pubsub`` (a subscription made before they were sent)."""
    got: list[bytes] = []
    deadline = time.monotonic() + 10
    while len(got) < n and time.monotonic() < deadline:
        message = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.1)
        if message is not None:
            got.append(message["data"])
    return got


def test_what_readers_use_is_announced_a_rebuild_only_at_its_switch(redis_client, redis_url, namespace):
    """Every snapshot stored into the readers' generation is announced on the pointer's channel
    (``generation:snapshot_id``); refused ones and a rebuild's are not; its switch is."""
    pubsub = redis_client.pubsub()
    pubsub.subscribe(Keys(namespace).generation)
    live_token = join_run(redis_client, namespace, uuid.uuid4().hex)[0]
    live = Publisher(redis_url, namespace, live_token, state=CountTable())
    assert live.publish(snap(live_token, 1)) == 1
    assert live.publish(snap(live_token, 1)) == Published.ALREADY_STORED
    build_token = new_run_token(redis_client, namespace)
    claim_generation(redis_client, namespace, build_token, build_token)
    build = Publisher(redis_url, namespace, build_token, generation=build_token, live=False, state=CountTable())
    assert build.publish(snap(build_token, 50)) == 1
    assert live.publish(snap(live_token, 2)) == 1
    switch_generation(redis_client, namespace, 0, build_token)
    assert build.publish(snap(build_token, 51)) == 1  # now the readers' generation
    assert _announced(pubsub, 5) == [b"0:%d" % snapshot_id(live_token, 1), b"0:%d" % snapshot_id(live_token, 2),
                                     b"%d:" % build_token, b"%d:%d" % (build_token, snapshot_id(build_token, 51))]
    pubsub.close()


def test_a_user_the_channels_are_closed_to_still_publishes(redis_client, redis_url, namespace):
    """An ACL user without pub/sub channels (Redis 7's default for a new user) loses the
    announcement, never the publish."""
    user = f"flow-{uuid.uuid4().hex[:8]}"
    redis_client.acl_setuser(user, enabled=True, passwords=["+secret"], keys=["*"], commands=["+@all"],
                             reset_channels=True)
    try:
        url = redis_url.replace("redis://", f"redis://{user}:secret@")
        token = join_run(redis_client, namespace, uuid.uuid4().hex)[0]
        assert Publisher(url, namespace, token, state=CountTable()).publish(snap(token, 1)) == 1
        assert read_latest(redis_client, namespace)["epoch"] == 1
        with pytest.raises(redis.exceptions.NoPermissionError):
            redis.Redis.from_url(url).publish(Keys(namespace).generation, b"x")  # the channel is closed to it
    finally:
        redis_client.acl_deluser(user)


def _rewind(client: redis.Redis, namespace: str, snapshot_id_: int, position: int) -> None:
    """Redis as an older backup has it: an older snapshot id and positions (its count table kept)."""
    k = Keys(namespace, 0)
    client.set(k.snapshot_id, snapshot_id_)
    client.hset(k.positions, "f", position)


def test_changes_are_never_laid_on_a_redis_behind_them(redis_client, redis_url, namespace):
    """A publisher's floor is the last snapshot it stored: a Redis that went back (an older backup)
    answers GAP and stores nothing of the changes; the count table's copy is sent whole instead."""
    token = join_run(redis_client, namespace, uuid.uuid4().hex)[0]
    pub = Publisher(redis_url, namespace, token, state=CountTable())
    assert pub.publish(snap(token, 1, counts={"a": 2, "b": 1}, full=True)) == Published.STORED
    assert pub.publish(snap(token, 2, counts={"b": 3})) == Published.STORED
    _rewind(redis_client, namespace, snapshot_id(token, 1), 1)
    redis_client.zadd(Keys(namespace, 0).counts, {"b": 1})  # the backup's count of b
    assert pub.publish(snap(token, 3, counts={"c": 1})) == Published.STORED  # GAP, then the whole table
    assert read_counts(redis_client, namespace) == {"a": 2, "b": 3, "c": 1}


def test_a_resumed_runs_floor_comes_from_its_recovery_state(redis_client, redis_url, namespace):
    """A first publisher given a floor (the positions its recovery state had published) refuses to
    lay changes on a Redis behind it: the boards, which hold no copy, stop saying how to heal."""
    from rankflow.connectors.redis_boards import BoardsState, RedisLostBoards
    from rankflow.state.board_snapshot import BoardsSnapshot

    def boards(run: int, epoch: int, entries: dict) -> BoardsSnapshot:
        return BoardsSnapshot(snapshot_id=snapshot_id(run, epoch), run=run, epoch=epoch, positions={"f": epoch},
                              dead_letters=0, counts={}, k_max=10, boards={}, entries=entries, dropped=[], aliases={},
                              partition_lag_ms={}, errors=[], total_boards=1)

    token = join_run(redis_client, namespace, uuid.uuid4().hex)[0]
    assert Publisher(redis_url, namespace, token, state=BoardsState()).publish(
        boards(token, 1, {("g", "all"): {"p1": (5, 1)}})) == Published.STORED
    ahead = Publisher(redis_url, namespace, token, state=BoardsState(complete=False), floor={"f": 3})
    with pytest.raises(RedisLostBoards, match="behind what the run has published.*Start the run again"):
        ahead.publish(boards(token, 4, {("g", "all"): {"p2": (7, 4)}}))
    assert read_latest(redis_client, namespace)["epoch"] == 1, "nothing of the refused changes stored"
    level = Publisher(redis_url, namespace, token, state=BoardsState(complete=False), floor={"f": 1})
    assert level.publish(boards(token, 2, {("g", "all"): {"p2": (7, 2)}})) == Published.STORED
