"""The boards flow's counter table (``operators.board_counter.BoardTable``, the kernel's) on its own.

The flow tests check it end to end; these pin what its report holds: per board the
newest entry of each player in the epoch, player counts, the local top, and the open
epoch's entries across a recovery state, written now or by an older version. The property
test runs the kernel's table against the Python table it replaced (``tests.board_counter_model``).
"""

from __future__ import annotations

import pickle
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rankflow import _native
from rankflow.operators.board_counter import BoardTable
from rankflow.operators.engine_types import Tally
from rankflow.operators.player_stage import BoardChanges, PlayerChanges
from rankflow.operators.routing import BoardBatch, route_board_entries
from tests.board_counter_model import BoardTableModel, entries_bytes


def batch_of(epoch: int, entries: list[PlayerChanges]) -> BoardBatch:
    """A board partition's batch of these entries, in the bytes the routing writes."""
    return BoardBatch(epoch, entries_bytes(entries))


def test_a_report_holds_each_players_newest_entry_per_board():
    table = BoardTable(k_max=2)
    table.stage(batch_of(1, [("ana", (("g", "all", 5, 10, True), ("g", "best", 5, 10, True))),
                              ("bo", (("g", "all", 3, 11, True),))]))
    table.stage(batch_of(1, [("ana", (("g", "all", 9, 12, False),))]))
    report = table.close(epoch=1)
    assert report.entries == {("g", "all"): {"ana": (9, 12), "bo": (3, 11)}, ("g", "best"): {"ana": (5, 10)}}
    assert report.boards == {("g", "all"): ([("ana", 9, 12), ("bo", 3, 11)], 2), ("g", "best"): ([("ana", 5, 10)], 1)}
    assert table.close(epoch=2).entries == {}, "an epoch with no change reports none"


def test_an_entry_that_got_worse_is_the_epochs_error_and_changes_no_top():
    table = BoardTable(k_max=2)
    table.stage(batch_of(1, [("ana", (("g", "all", 5, 10, True),))]))
    table.close(epoch=1)
    table.stage(batch_of(2, [("ana", (("g", "all", 4, 10, False),))]))
    report = table.close(epoch=2)
    assert report.errors == ["entry got worse: ana on g/all -> 4 at 10"]
    assert report.boards == {("g", "all"): (None, 1)}, "the top did not change"


def test_the_open_epoch_survives_a_recovery_state_of_every_format():
    python_table = BoardTableModel(k_max=2)  # the Python table of before, and the dict it stored
    python_table.stage([("ana", (("g", "all", 5, 10, True),))])
    table = BoardTable(k_max=2)
    table.stage(batch_of(1, [("ana", (("g", "all", 5, 10, True),))]))
    for state in (pickle.loads(pickle.dumps(table.state())),  # the kernel's bytes
                  python_table.state(),  # the Python table's, entries grouped by board
                  {**python_table.state(), "entries": [("ana", (("g", "all", 5, 10, True),))]}):  # before grouping
        resumed = BoardTable(k_max=2, resume=state)
        report = resumed.close(epoch=1)
        assert report.entries == {("g", "all"): {"ana": (5, 10)}}
        assert report.boards == {("g", "all"): ([("ana", 5, 10)], 1)}, "its top and player count restored"


def test_a_recovery_state_of_other_bytes_is_refused():
    with pytest.raises(ValueError, match="not a board partition's recovery state"):
        BoardTable(k_max=2, resume=b"rankflow-board-table-9\n")


def test_a_board_retention_drops_reports_its_entries_without_a_top():
    table = BoardTable(k_max=2)
    table.stage(batch_of(1, [("ana", (("g", "daily:2027-01-01", 5, 1, True),))]))
    table.close(epoch=1)
    table.stage(batch_of(1, [("bo", (("g", "daily:2027-01-01", 1, 2, True), ("g", "daily:2027-01-20", 1, 3, True)))]))
    report = table.close(epoch=2)  # the 20th keeps 8 days: the 1st is dropped here, with bo's late entry on it
    # the merger decides what the late entry does: the period's final standings (boards.md 9), or nothing
    assert report.entries == {("g", "daily:2027-01-20"): {"bo": (1, 3)}, ("g", "daily:2027-01-01"): {"bo": (1, 2)}}
    assert set(report.boards) == {("g", "daily:2027-01-20")}
    assert ("g", "daily:2027-01-01") not in table.boards


# -- the kernel against the Python table it replaced ------------------------------------------

PLAYERS = ["a", "b", "c", "d", "é", "p10", "p9"]
BOARDS = ["all", "best", "season:s", *(f"daily:2027-01-{d:02}" for d in (1, 2, 5, 9, 10, 17)),
          *(f"weekly:2027-W{w:02}" for w in (1, 2, 4))]
SEASONS = {"season:s": "2027-01-03"}

step = st.one_of(
    st.tuples(st.just("entries"), st.lists(st.tuples(
        st.sampled_from(PLAYERS), st.sampled_from(["g", "h"]),
        st.lists(st.tuples(st.sampled_from(BOARDS), st.integers(0, 2), st.integers(0, 2), st.booleans()),
                 min_size=1, max_size=3)), max_size=6)),
    st.tuples(st.just("close"), st.none()),
    st.tuples(st.just("recover"), st.sampled_from(["bytes", "python"])),
)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 3), st.lists(step, max_size=30))
def test_the_kernels_table_reports_what_the_python_table_did(k_max, steps):
    """Generated entry streams: entries that improve (a score that rises, or an earlier
    ``reached_at`` at an equal one), ties on score and time, some that get worse, days and
    weeks far enough apart for retention to drop boards, two games; epochs closed now and
    then; the table resumed from its own bytes, or from the Python table's dict, mid-epoch."""
    table, model = BoardTable(k_max, season_ends=SEASONS), BoardTableModel(k_max, season_ends=SEASONS)
    held: dict[tuple[str, str, str], tuple[int, int]] = {}
    epoch = 1
    for kind, arg in steps:
        if kind == "entries":
            batch = []
            for player, game, changes in arg:
                mine = []
                for board, rise, earlier, worse in changes:
                    was = held.get((player, game, board))
                    if was is None:
                        entry = (rise, 100 - earlier)
                    elif worse:  # outside the contract: refused by both, with the same error
                        entry = (was[0] - 1, was[1])
                    else:
                        entry = (was[0] + rise, was[1] if rise else was[1] - earlier)
                        held[(player, game, board)] = entry
                    if was is None:
                        held[(player, game, board)] = entry
                    mine.append((game, board, *entry, was is None))
                batch.append((player, tuple(mine)))
            table.stage(batch_of(epoch, batch))
            model.stage(batch)
        elif kind == "close":
            report = table.close(epoch)
            boards, entries, errors = model.close()
            assert (report.boards, report.entries, report.errors) == (boards, entries, errors)
            assert table.boards == set(model.boards)
            epoch += 1
        else:
            table = BoardTable(k_max, resume=table.state() if arg == "bytes" else model.state(), season_ends=SEASONS)
            model = BoardTableModel(k_max, resume=model.state(), season_ends=SEASONS)
        table._table._check()
        for game, board in model.boards:
            assert table._table.top(game, board, k_max) == model.boards[(game, board)].top.top(k_max)
    report = table.close(epoch)
    assert (report.boards, report.entries, report.errors) == model.close()


# -- routing: a player's entries go to partition crc32(player_id) % P ------------------------

@settings(max_examples=200, deadline=None)
@given(st.integers(1, 9), st.lists(st.lists(st.tuples(st.text(min_size=1, max_size=12), st.integers(0, 3)),
                                            max_size=8), max_size=4))
def test_entries_go_to_the_partition_of_their_players_crc32(partitions, calls):
    """The kernel's split keeps zlib's partition function (a run resumed over a recovery
    directory written before finds every player where it was) and each call's order."""
    items, expected = [], {}
    for epoch, call in enumerate(calls, start=1):
        entries = [(player, (("g", "all", n, 0, True),)) for player, n in call]
        items.append(("shard", BoardChanges(epoch, entries)))
        items.append(("shard", Tally(epoch, {"duplicates": 1})))
        for entry in entries:
            p = zlib.crc32(entry[0].encode()) % partitions
            expected.setdefault((str(p), epoch), []).append(entry)
    routed = route_board_entries(items, partitions)
    assert {(p, batch.epoch): _native.board_entries(batch.entries) for p, batch in routed} == expected
    assert all(type(batch) is BoardBatch for _, batch in routed)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text(min_size=1, max_size=12), st.lists(st.tuples(
    st.text(max_size=8), st.text(max_size=20), st.integers(-2**63, 2**63 - 1), st.integers(-2**63, 2**63 - 1),
    st.booleans()), max_size=4).map(tuple)), max_size=8), st.integers(1, 5))
def test_entries_cross_as_bytes_and_read_back_the_same(entries, partitions):
    """What crosses between processes is what the per-player stage made: every id and name
    (any text), score and time (any 64-bit integer) and the flag, in the call's order."""
    split = _native.board_partitions(entries, partitions)
    assert sorted(p for p, _ in split) == sorted({zlib.crc32(player.encode()) % partitions for player, _ in entries})
    for p, blob in split:
        assert _native.board_entries(blob) == [e for e in entries if zlib.crc32(e[0].encode()) % partitions == p]


def test_bytes_of_another_form_are_refused():
    blob = entries_bytes([("ana", (("g", "all", 5, 10, True),))])
    for bad in (blob[:-1], blob + b"\x01", blob[:-1] + b"\x02"):
        with pytest.raises(ValueError, match="not a call's board entries"):
            BoardTable(k_max=2).stage(BoardBatch(1, bad))
        with pytest.raises(ValueError, match="not a call's board entries"):
            _native.board_entries(bad)
