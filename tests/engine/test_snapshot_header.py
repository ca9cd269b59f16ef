"""Every flow's snapshot document opens with the same header (state.snapshot.cut_header), in one order."""

from rankflow.state.activity_snapshot import ActivitySnapshot
from rankflow.state.board_snapshot import BoardsSnapshot
from rankflow.state.snapshot import RecentRanking, Snapshot

HEADER = ["snapshot_id", "run", "epoch", "positions", "published_at"]
COUNTS = {"dead_letters.x": 2, "duplicates": 3, "dead_letters.a": 1}


def test_each_document_opens_with_the_cut_and_counts_dead_letters_by_reason():
    boards = BoardsSnapshot(1_000_000_001, 1, 1, {"0": 5}, 3, 10, {("g", "all"): (2, [("p", 5, 7)])}, {},
                            [("g", "daily:x")], {"g": ("d", "w")}, {"0": 4}, [], counts=COUNTS, total_boards=4)
    activity = ActivitySnapshot(1_000_000_002, 1, 2, {"0": 5}, 3, COUNTS, 10, 830_000, 60_000, 3, "messages",
                                [(("w", "c"), 3)], 1, {"w": {"c": 3}}, True, {"0": 1}, [])
    listeners = Snapshot(1_000_000_003, 1, 3, {"0": 1}, 5, 4, 3, 2, 10, [("s", 5)], {"0": 0}, [],
                         recent=RecentRanking(1, 2, 3, [("s", 1)]))
    for snap in (boards, activity, listeners):
        doc = snap.to_json_obj(1234)
        assert list(doc)[:5] == HEADER
        assert [doc[k] for k in HEADER] == [snap.snapshot_id, snap.run, snap.epoch, snap.positions, 1234]
    for snap in (boards, activity):
        assert snap.to_json_obj(0)["dead_letters_by_reason"] == {"a": 1, "x": 2}
    assert list(boards.to_json_obj(0))[5:8] == ["dead_letters", "dead_letters_by_reason", "duplicates"]
    assert list(activity.to_json_obj(0))[5] == "watermark"
    assert list(listeners.to_json_obj(0))[5] == "total_listeners"
