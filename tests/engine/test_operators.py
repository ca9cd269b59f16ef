"""The counter and merger logic without the runtime: barrier handling and error reports."""

from __future__ import annotations

import pytest

from rankflow.connectors.source_batch import SourceBatch
from rankflow.operators.engine_types import PositionReport, Tick
from rankflow.operators.keyed_shards import FORMAT
from rankflow.operators.parse import ParsedBatch
from rankflow.operators.routing import SongBatch
from rankflow.operators.song_counter import PartitionReport, SongCounterLogic
from rankflow.operators.song_ranking import song_merger
from rankflow.operators.user_stage import ShardRouter, UserShardLogic, shard_key, shard_of
from rankflow.state.events import PlaybackEvent


def test_counter_reports_each_epoch_once_when_a_newer_epoch_arrives():
    logic = SongCounterLogic(k_max=2, resume=None, recoverable=False)
    out, _ = logic.on_batch([SongBatch(1, [("a", 0, 1, 1), ("b", 0, 1, 1)]), SongBatch(1, [("a", 0, 1, 1)])])
    assert out == []  # epoch 1 may still get items
    out, _ = logic.on_batch([Tick(2), SongBatch(2, [("b", 0, -1, -1)])])
    assert [(r.epoch, r.top, r.total, r.counted_users) for r in out] == [(1, [("a", 2), ("b", 1)], 3, 3)]
    out, _ = logic.on_eof()
    assert [(r.epoch, r.top, r.total) for r in out] == [(2, [("a", 2)], 2)]
    assert logic.on_eof()[0] == []


def test_a_negative_count_is_reported_in_the_snapshot_not_clamped():
    counter = SongCounterLogic(k_max=5, resume=None, recoverable=False)
    counter.on_batch([SongBatch(1, [("a", 0, 1, 1), ("b", 0, -1, -1)])])
    [report] = counter.on_eof()[0]
    assert report.negative == [("b", -1)] and report.total == 0
    merger = song_merger(1, 5, 1)(None)
    merger.on_batch([PositionReport(1, "f", 2)])
    [snap] = merger.on_batch([("0", report)])[0]
    assert snap.items == [("a", 1)]
    assert snap.total_listeners == 0 and snap.counted_users == 0
    assert snap.errors == ["negative count: b = -1 (partition 0)"]


def test_merger_flags_a_broken_invariant_and_waits_for_all_partitions():
    merger = song_merger(2, 5, 7)(None)
    c0 = SongCounterLogic(k_max=5, resume=None, recoverable=False)
    c1 = SongCounterLogic(k_max=5, resume=None, recoverable=False)
    c0.on_batch([SongBatch(1, [("a", 0, 1, 0)])])  # a +1 whose user was never counted: a bug upstream
    c1.on_batch([Tick(1)])
    assert merger.on_batch([("0", c0.on_eof()[0][0])])[0] == []
    [snap] = merger.on_batch([("1", c1.on_eof()[0][0])])[0]
    assert snap.snapshot_id == 7_000_000_001
    assert snap.errors == ["invariant violated: total_listeners 1 != counted_users 0"]


def test_split_songs_enter_the_top_in_ranking_order_whatever_order_their_partials_come_in():
    """A split song's count is the sum of its partials over the partitions; those sums are
    one more list for the merge of local tops, which must be in ranking order first."""
    def report(top, partials):
        total = sum(c for _, c in top) + sum(partials.values())
        return PartitionReport(1, top, partials, total, total, len(top), [], {}, False, 0.0)
    merger = song_merger(2, 4, 1)(None)
    merger.on_batch([PositionReport(1, "f", 9)])
    merger.on_batch([("0", report([("b", 5)], {"x": 1, "y": 2, "z": 6}))])
    [snap] = merger.on_batch([("1", report([("a", 2)], {"x": 1, "y": 2}))])[0]
    assert snap.items == [("z", 6), ("b", 5), ("y", 4), ("x", 2)]
    assert snap.split_songs == ["x", "y", "z"] and snap.errors == []


def parsed(events: list[PlaybackEvent], partition: str = "f", epoch: int = 1) -> ParsedBatch:
    """A parsed batch holding ``events``, as the parse step hands it to the router."""
    source = SourceBatch(partition, 0, 0, [])
    source.epoch = epoch
    batch = ParsedBatch(source)
    batch.events = list(events)
    return batch


def test_shard_router_groups_by_shard_of_and_keeps_each_users_order():
    events = [PlaybackEvent(f"u{i % 7}", f"p{i}", "s", "START", i, i, i, b"") for i in range(60)]
    groups = dict(ShardRouter(4)(parsed(events, "f", 3)))
    assert set(groups) == {shard_key(shard_of(ev.user_id, 4)) for ev in events}
    for key, (partition, epoch, group) in groups.items():
        assert (partition, epoch) == ("f", 3)
        assert all(shard_key(shard_of(ev[0], 4)) == key for ev in group)
    for user in {ev.user_id for ev in events}:
        mine = [ev[4] for ev in groups[shard_key(shard_of(user, 4))][2] if ev[0] == user]
        assert mine == [ev.version for ev in events if ev.user_id == user], "arrival order per user"
    by_user = dict(ShardRouter(0)(parsed(events)))
    assert set(by_user) == {ev.user_id for ev in events}, "no shards: a key per user"


def test_a_split_song_reported_at_zero_when_its_partials_empty():
    """The merger learns that a split song's last listener left: 0 goes into the count table."""
    counter = SongCounterLogic(k_max=5, resume=None, recoverable=False)
    merger = song_merger(1, 5, 1)(None)
    counter.on_batch([SongBatch(1, [("x", 2, 1, 1)], ["x"])])
    [report1] = counter.on_batch([SongBatch(2, [("x", 2, -1, -1)])])[0]
    [report2] = counter.on_eof()[0]
    merger.on_batch([PositionReport(1, "f", 1), PositionReport(2, "f", 2)])
    [snap1] = merger.on_batch([("0", report1)])[0]
    [snap2] = merger.on_batch([("0", report2)])[0]
    assert snap1.counts == {"x": 1} and snap1.split_songs == ["x"]
    assert snap2.counts == {"x": 0} and snap2.split_songs == [] and snap2.items == []


def test_partition_lag_is_the_time_from_reading_the_input_to_closing_the_barrier():
    counter = SongCounterLogic(k_max=5, resume=None, recoverable=False)
    merger = song_merger(1, 5, 1)(None)
    counter.on_batch([SongBatch(1, [("a", 0, 1, 1)])])
    [report] = counter.on_eof()[0]
    read_at = report.closed_at - 0.75
    merger.on_batch([PositionReport(1, "f", 1, read_at - 1.0), PositionReport(1, "f", 1, read_at)])
    [snap] = merger.on_batch([("0", report)])[0]
    assert snap.partition_lag_ms == {"0": 750}


def test_a_batch_without_its_epoch_is_refused():
    with pytest.raises(RuntimeError, match="without its epoch"):
        ParsedBatch(SourceBatch("f", 0, 1, [b"{}"]))


def test_user_snapshots_name_their_users_and_older_unnamed_ones_still_resume():
    logic = UserShardLogic.builder(whole=True)(None)
    logic.on_batch([("f", 1, [("u", "p", "s", "START", 1, 0, 0, b"", 0)])])
    assert logic.snapshot() == (FORMAT, {"u": (1, "p", "s", 0, True)})
    older = UserShardLogic.builder(whole=True)((1, "p", "s", True, 2, 4))  # before: no user id, a sixth field
    older.on_batch([("f", 2, [("u", "p", "s", "HEARTBEAT", 1, 5, 1, b"", 0)])])
    assert older.snapshot() == (FORMAT, {"u": (1, "p", "s", 5, True, 2)}), "the salt of a partial counter is kept"


def test_merger_state_stored_before_the_report_moved_to_song_counter_still_resumes():
    """Recovery state is pickled: a merger stored by an older run names the pending reports'
    type ``rankflow.operators.merger.PartitionReport``, where it was then defined."""
    import pickle

    before = song_merger(2, 5, 1)(None)
    c0 = SongCounterLogic(k_max=5, resume=None, recoverable=False)
    c0.on_batch([SongBatch(1, [("a", 0, 1, 1)])])
    before.on_batch([PositionReport(1, "f", 1), ("0", c0.on_eof()[0][0])])
    new = pickle.dumps(before.snapshot(), protocol=2)  # protocol 2 names classes as text
    old = new.replace(b"crankflow.operators.song_counter\nPartitionReport\n",
                      b"crankflow.operators.merger\nPartitionReport\n")
    assert old != new and b"song_counter" not in old
    resumed = song_merger(2, 5, 1)(pickle.loads(old))
    c1 = SongCounterLogic(k_max=5, resume=None, recoverable=False)
    c1.on_batch([SongBatch(1, [("b", 0, 2, 2)])])
    [snap] = resumed.on_batch([("1", c1.on_eof()[0][0])])[0]
    assert snap.items == [("b", 2), ("a", 1)] and snap.positions == {"f": 1} and snap.errors == []
