"""A worker's changelog shards synced together at a barrier (connectors.barrier_sync).

The rule that keeps recovery exact: when a snapshot returns a position whose frame is not yet
``fdatasync``ed, another shard due in the same epoch is still to snapshot, and its snapshot
syncs everything before returning (Bytewax commits an epoch after all its snapshots). The
bytes written are the changelog's own, so a directory written with a sync per shard (the
code before) restores the same records.
"""

from __future__ import annotations

import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from rankflow.connectors.barrier_sync import BarrierSync, new_run
from rankflow.connectors.changelog import ShardChangelog


def everything() -> dict:
    return {}


def test_the_last_shard_due_syncs_every_frame_of_the_barrier(tmp_path):
    group = BarrierSync()
    logs = {name: ShardChangelog(tmp_path, name) for name in ("window-0", "window-1")}
    for log in logs.values():
        log.restore(None)
        log.append({}, everything, 1)  # the first append writes the image, synced as before
    for name in logs:
        group.expect(2, name)
    logs["window-0"].append({"7": {"w": {"c": 1}}}, everything, 2, sync=False)
    group.written(2, "window-0", logs["window-0"])
    assert logs["window-0"].unsynced  # window-1's snapshot of epoch 2 is still to come
    logs["window-1"].append({}, everything, 2, sync=False)  # nothing changed: nothing written
    group.written(2, "window-1", logs["window-1"])
    assert not any(log.unsynced for log in logs.values())


def test_a_shard_not_expected_syncs_at_once(tmp_path):
    group = BarrierSync()
    log = ShardChangelog(tmp_path, "window-3")
    log.restore(None)
    log.append({}, everything, 1)
    group.expect(2, "other")
    log.append({"1": {"w": {"c": 2}}}, everything, 2, sync=False)
    group.written(2, "window-3", log)  # never said it took an item of 2: no one else will sync it
    assert not log.unsynced


def test_each_worker_thread_has_its_own_group():
    mine = BarrierSync.of_this_worker()
    theirs: list[BarrierSync] = []
    thread = threading.Thread(target=lambda: theirs.append(BarrierSync.of_this_worker()))
    thread.start()
    thread.join()
    assert mine is BarrierSync.of_this_worker() and theirs[0] is not mine


def test_a_new_run_drops_the_groups_of_the_run_before(tmp_path):
    """A run stopped before a shard due in its epoch snapshotted leaves that shard due; the next
    run in the same process (and thread) starts with a group of its own, so its own last shard
    syncs its frames."""
    stopped = BarrierSync.of_this_worker()
    stopped.expect(2, "window-9")  # that run ended before window-9's snapshot of epoch 2
    new_run()
    group = BarrierSync.of_this_worker()
    assert group is not stopped and not group.due
    log = ShardChangelog(tmp_path, "window-0")
    log.restore(None)
    log.append({}, everything, 1)
    group.expect(2, "window-0")
    log.append({"1": {"w": {"c": 2}}}, everything, 2, sync=False)
    group.written(2, "window-0", log)
    assert not log.unsynced


def test_frames_synced_together_are_the_bytes_of_a_sync_each(tmp_path):
    """A directory written by the code before (a sync per append) and one written now hold the
    same bytes, and each restores the same records at the same positions."""
    frames = [{"5": {"w1": {"a": 1}}}, {"5": {"w1": {"a": 2}, "w2": {"b": 1}}}, {"5": None, "6": {"w1": {"a": 1}}}]
    before, now = tmp_path / "before", tmp_path / "now"
    for directory in (before, now):
        directory.mkdir()
    old, new = ShardChangelog(before, "window-0"), ShardChangelog(now, "window-0")
    old.restore(None)
    new.restore(None)
    group = BarrierSync()
    positions = []
    for epoch, frame in enumerate(frames, start=1):
        group.expect(epoch, "window-0")
        p_old = old.append(frame, everything, epoch)
        p_new = new.append(frame, everything, epoch, sync=False)
        group.written(epoch, "window-0", new)
        assert p_old == p_new
        positions.append(p_new)
    old.close()
    new.close()
    assert (before / "window-0.g1.log").read_bytes() == (now / "window-0.g1.log").read_bytes()
    assert ShardChangelog(now, "window-0").restore(positions[-1]) == \
        ShardChangelog(before, "window-0").restore(positions[-1])


class Recording:
    """A log that notes whether what was written to it is durable."""

    def __init__(self) -> None:
        self.unsynced = False

    def write(self) -> None:
        self.unsynced = True

    def sync(self) -> None:
        self.unsynced = False


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 4), st.booleans(), st.booleans()), max_size=6), max_size=6))
def test_no_epoch_is_left_unsynced_once_its_last_due_shard_wrote(epochs):
    """Generated barriers: per epoch, shards that take items (and perhaps write a frame, perhaps
    never snapshot), in any order. Whenever a snapshot returns with an unsynced frame, a shard
    due in that epoch has not written yet; after an epoch's last due snapshot nothing is unsynced."""
    group = BarrierSync()
    logs = {s: Recording() for s in range(5)}
    for epoch, shards in enumerate(epochs, start=1):
        taking = {s for s, _, _ in shards}
        for s in taking:
            group.expect(epoch, s)
        snapshotting = [(s, writes) for s, writes, snapshots in shards if snapshots]
        seen: set[int] = set()
        for s, writes in snapshotting:
            if s in seen:
                continue
            seen.add(s)
            if writes:
                logs[s].write()
            group.written(epoch, s, logs[s] if writes else None)
            still_due = taking - seen
            if any(log.unsynced for log in logs.values()):
                assert still_due, "a snapshot returned an unsynced frame with no shard left to sync it"
        if taking and taking <= seen:  # (a shard that never snapshots leaves its epoch to the next sync)
            assert not any(log.unsynced for log in logs.values())
