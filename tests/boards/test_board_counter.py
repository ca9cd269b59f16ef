"""The boards flow's counter table (``operators.board_counter.BoardTable``) on its own.

The flow tests check it end to end; these pin what its report holds: per board the
newest entry of each player in the epoch, player counts, the local top, and the open
epoch's entries across a recovery state, written now or by an older version.
"""

from __future__ import annotations

from rankflow.operators.board_counter import BoardTable
from rankflow.operators.routing import BoardBatch


def test_a_report_holds_each_players_newest_entry_per_board():
    table = BoardTable(k_max=2)
    table.stage(BoardBatch(1, [("ana", (("g", "all", 5, 10, True), ("g", "best", 5, 10, True))),
                              ("bo", (("g", "all", 3, 11, True),))]))
    table.stage(BoardBatch(1, [("ana", (("g", "all", 9, 12, False),))]))
    report = table.close(epoch=1)
    assert report.entries == {("g", "all"): {"ana": (9, 12), "bo": (3, 11)}, ("g", "best"): {"ana": (5, 10)}}
    assert report.boards == {("g", "all"): ([("ana", 9, 12), ("bo", 3, 11)], 2), ("g", "best"): ([("ana", 5, 10)], 1)}
    assert table.close(epoch=2).entries == {}, "an epoch with no change reports none"


def test_the_open_epoch_survives_a_recovery_state_of_either_format():
    table = BoardTable(k_max=2)
    table.stage(BoardBatch(1, [("ana", (("g", "all", 5, 10, True),))]))
    for state in (table.state(),  # entries grouped by board
                  {**table.state(), "entries": [("ana", (("g", "all", 5, 10, True),))]}):  # written before grouping
        resumed = BoardTable(k_max=2, resume=state)
        report = resumed.close(epoch=1)
        assert report.entries == {("g", "all"): {"ana": (5, 10)}}
        assert report.boards == {("g", "all"): ([("ana", 5, 10)], 1)}, "its top and player count restored"


def test_a_board_retention_drops_reports_its_entries_without_a_top():
    table = BoardTable(k_max=2)
    table.stage(BoardBatch(1, [("ana", (("g", "daily:2027-01-01", 5, 1, True),))]))
    table.close(epoch=1)
    table.stage(BoardBatch(1, [("bo", (("g", "daily:2027-01-01", 1, 2, True), ("g", "daily:2027-01-20", 1, 3, True)))]))
    report = table.close(epoch=2)  # the 20th keeps 8 days: the 1st is dropped here, with bo's late entry on it
    # the merger decides what the late entry does: the period's final standings (boards.md 9), or nothing
    assert report.entries == {("g", "daily:2027-01-20"): {"bo": (1, 3)}, ("g", "daily:2027-01-01"): {"bo": (1, 2)}}
    assert set(report.boards) == {("g", "daily:2027-01-20")}
    assert ("g", "daily:2027-01-01") not in table.boards
