"""Large activity snapshots are staged in short calls and switched in one step
(``connectors.activity_staging``): what readers see is always one whole snapshot, the
same as one atomic script would give, and nothing is left behind in Redis."""

from __future__ import annotations

import threading
import uuid

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rankflow.connectors.activity_read import ActivityReader
from rankflow.connectors.activity_staging import items, stage
from rankflow.connectors.redis_activity import ActivityState
from rankflow.connectors.redis_generations import Fence, FencedError, join_run, new_run_token, claim_generation
from rankflow.connectors.redis_keys import Keys, activity_namespace
from rankflow.connectors.redis_publish import Publisher
from rankflow.state.activity_snapshot import ActivitySnapshot
from rankflow.state.snapshot import SNAPSHOT_ID_RUN_FACTOR, snapshot_id

Counts = dict[str, dict[str, int]]


def snap(run: int, epoch: int, changed: Counts, full: bool = False) -> ActivitySnapshot:
    return ActivitySnapshot(snapshot_id(run, epoch), run, epoch, {"f": epoch}, 0, {}, 100, 600_000 + epoch,
                            60_000, 60, "messages", [], 0, changed, full, {}, [])


def start(client: redis.Redis, namespace: str) -> tuple[str, int, int]:
    ns = activity_namespace(namespace)
    token, generation = join_run(client, ns, uuid.uuid4().hex, fresh=True)
    return ns, token, generation


def held(client: redis.Redis, ns: str, generation: int) -> Counts:
    """Every workspace's counts as a reader sees them, read through the slots."""
    k = Keys(ns, generation)
    slots = {w.decode(): s.decode() for w, s in client.hgetall(k.workspace_slots).items()}
    out: Counts = {}
    for ws in sorted(w.decode() for w in client.smembers(k.workspaces)):
        entries = client.zrange(k.workspace(ws, slots.get(ws, "a")), 0, -1, withscores=True)
        out[ws] = {ch.decode(): int(n) for ch, n in entries}
    return out


def workspace_keys(client: redis.Redis, ns: str, generation: int) -> set[str]:
    """Every workspace sorted set of the generation, in either slot."""
    k = Keys(ns, generation)
    escape = str.maketrans({"{": "\\{", "}": "\\}", "*": "\\*"})
    return {key.decode() for slot in "ab"
            for key in client.scan_iter(match=k.workspace("", slot).translate(escape) + "*")}


def apply(model: Counts, changed: Counts, full: bool) -> None:
    if full:
        model.clear()
    for ws, channels in changed.items():
        got = model.setdefault(ws, {})
        for ch, n in channels.items():
            if n > 0:
                got[ch] = n
            else:
                got.pop(ch, None)
        if not got:
            del model[ws]


def test_items_split_a_large_workspace_and_start_it_once():
    got = list(items({"A": {str(i): i for i in range(5)}}, True, 2))
    assert [(ws, how) for ws, how, _ in got] == [("A", "fresh"), ("A", "more"), ("A", "more")]


changes = st.dictionaries(st.sampled_from(["W1", "W2", "W3", "w:x", "b"]),
                          st.dictionaries(st.sampled_from(list("abcdefg")), st.integers(0, 5), max_size=7),
                          max_size=5)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(st.booleans(), changes), min_size=1, max_size=8),
       stage_at=st.sampled_from([0, 1, 2, 3, 1000]))
def test_staged_publishes_store_what_one_script_would(redis_client, redis_url, steps, stage_at):
    """Any mix of full and delta snapshots, staged or not and cut at any budget: the
    counts readers see after each one are the model's, and only the slots readers
    read exist (nothing staged is left)."""
    ns, token, generation = start(redis_client, "t-" + uuid.uuid4().hex[:12])
    model: Counts = {}
    pub = Publisher(redis_url, ns, token, generation, state=ActivityState(stage_at=stage_at, stage_every_s=0))
    try:
        for epoch, (full, changed) in enumerate(steps, 1):
            full = full or epoch == 1
            assert pub.publish(snap(token, epoch, changed, full)) == 1
            apply(model, changed, full)
            assert held(redis_client, ns, generation) == model
            k = Keys(ns, generation)
            slots = {w.decode(): s.decode() for w, s in redis_client.hgetall(k.workspace_slots).items()}
            assert workspace_keys(redis_client, ns, generation) == \
                {k.workspace(ws, slots.get(ws, "a")) for ws in model}, "only the slots readers read exist"
            assert set(slots) <= set(model)
            assert not redis_client.exists(k.workspaces_staged), "every staged slot was freed or switched"
    finally:
        pub.close()


def test_readers_see_whole_snapshots_while_large_ones_are_staged(redis_client, redis_url, namespace):
    """Every snapshot sets every channel of every workspace to its epoch, staged in calls
    of a few members: a reader reading all the time must find every count of an
    answer equal to the epoch of the snapshot id it names."""
    ns, token, generation = start(redis_client, namespace)
    workspaces, channels, epochs = [f"w{i}" for i in range(20)], [f"c{i}" for i in range(30)], 25
    stop, seen, bad = threading.Event(), set(), []

    def read() -> None:
        reader = ActivityReader(redis.Redis.from_url(redis_url), namespace)
        while not stop.is_set():
            for ws in workspaces[::7]:
                try:
                    answer = reader.top(ws, 100)
                except LookupError:
                    continue
                epoch = answer["snapshot_id"] % SNAPSHOT_ID_RUN_FACTOR
                seen.add(epoch)
                if {item["count"] for item in answer["items"]} != {epoch}:
                    bad.append((epoch, answer["items"][:3]))
        reader.client.close()

    thread = threading.Thread(target=read)
    pub = Publisher(redis_url, ns, token, generation, state=ActivityState(stage_at=7, stage_every_s=0))
    try:
        thread.start()
        for epoch in range(1, epochs + 1):
            changed = {ws: {ch: epoch for ch in channels} for ws in workspaces}
            assert pub.publish(snap(token, epoch, changed, full=epoch == 1)) == 1
    finally:
        stop.set()
        thread.join()
        pub.close()
    assert not bad, f"answers mixing snapshots: {bad[:3]}"
    assert len(seen) > 1, "the reader read while snapshots were published"


def test_a_staging_cut_short_is_invisible_and_the_next_execution_clears_it(redis_client, redis_url, namespace):
    ns, token, generation = start(redis_client, namespace)
    k = Keys(ns, generation)
    first = Publisher(redis_url, ns, token, generation, state=ActivityState(stage_at=1, stage_every_s=0))
    try:
        assert first.publish(snap(token, 1, {"A": {"x": 1, "y": 2}}, full=True)) == 1
    finally:
        first.close()
    # a run that died after staging a snapshot, before switching to it
    stage(redis_client, k, Fence(token, generation, "live"), {"A": {"x": 9}, "B": {"z": 9}}, False, budget=1)
    reader = ActivityReader(redis_client, namespace)
    assert reader.top("A", 5)["items"] == [{"rank": 1, "channel_id": "y", "count": 2},
                                           {"rank": 2, "channel_id": "x", "count": 1}]
    assert reader.top("B", 5)["items"] == []
    assert len(workspace_keys(redis_client, ns, generation)) == 3, "A's staged slot and B's are left"
    resumed = Publisher(redis_url, ns, token, generation, state=ActivityState())  # small: one script
    try:
        assert resumed.publish(snap(token, 2, {"A": {"x": 3}}, full=True)) == 1
    finally:
        resumed.close()
    assert held(redis_client, ns, generation) == {"A": {"x": 3}}
    assert workspace_keys(redis_client, ns, generation) == {k.workspace("A")}
    assert not redis_client.exists(k.workspaces_staged)


def test_a_fenced_run_cannot_stage(redis_client, redis_url, namespace):
    ns, token, generation = start(redis_client, namespace)
    old = Publisher(redis_url, ns, token, generation, state=ActivityState(stage_at=1, stage_every_s=0))
    try:
        assert old.publish(snap(token, 1, {"A": {"x": 1}}, full=True)) == 1
        newer = new_run_token(redis_client, ns)
        claim_generation(redis_client, ns, generation, newer)
        with pytest.raises(FencedError):
            old.publish(snap(token, 2, {"A": {"x": 2, "y": 1}}))
    finally:
        old.close()
    assert held(redis_client, ns, generation) == {"A": {"x": 1}}


def test_a_bounded_replay_stores_each_snapshot_in_one_script_unless_told():
    """Staging is for readers of a live run; ``--until-eof`` only catches up (``RunOptions.stage_at``)."""
    from rankflow.options import RunOptions

    assert RunOptions(input="jsonl:x", flow="activity").stage_at == 2_000
    assert RunOptions(input="jsonl:x", flow="activity", until_eof=True).stage_at == 0
    assert RunOptions(input="jsonl:x", flow="activity", until_eof=True, publish_stage=5).stage_at == 5
