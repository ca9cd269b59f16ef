"""What the boards' combiner stores at each barrier (operators.board_ranking.BoardRanking.state).

The local tops are stored encoded per board (JSON, or a pickle for scores beyond 64 bits), each
encoded again only once a barrier changed the board: the state must always be the live tops (never a stale board), a resumed combiner must go on
as the live one, and a state stored by earlier code (a dict per board, a recovery directory of
before) must resume the same way.
"""

from __future__ import annotations

import pickle
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rankflow.operators.board_counter import BoardsReport
from rankflow.operators.board_ranking import BoardRanking, _decoded
from rankflow.operators.merger import Cut

K = 3
BOARDS = [("g1", "all"), ("g1", "best"), ("g1", "daily:2027-01-01"), ("g1", "daily:2027-01-02"),
          ("g1", "daily:2027-01-12"), ("g1", "weekly:2027-W01"), ("g2", "all")]
PARTS = ["0", "1", "2"]

tops = st.lists(st.tuples(st.sampled_from(["p1", "p2", "p3", "p4"]), st.sampled_from([0, 1, 5, 2**63, 2**80]),
                          st.integers(0, 9)),
                max_size=K).map(lambda top: sorted(set(top), key=lambda e: (-e[1], e[2], e[0]))[:K])
reports = st.dictionaries(st.sampled_from(PARTS),
                          st.dictionaries(st.sampled_from(BOARDS), st.tuples(st.none() | tops, st.integers(0, 50)),
                                          max_size=4), min_size=1, max_size=3)


def cut(epoch: int) -> Cut:
    return Cut(epoch, 1, epoch, {}, 0, 0.0)


def combine(ranking: BoardRanking, epoch: int, barrier: dict[str, dict]) -> Any:
    snapshot = ranking.combine(cut(epoch), {part: BoardsReport(epoch, boards, {}, [], 0.0)
                                            for part, boards in barrier.items()})
    return snapshot.boards, snapshot.dropped, snapshot.total_boards


def earlier_form(ranking: BoardRanking) -> dict[str, Any]:
    """The state as the code before stored it: a dict of partitions per board."""
    return {"local": {bid: dict(parts) for bid, parts in ranking.local.items()}, "newest": dict(ranking.newest)}


@settings(max_examples=150, deadline=None)
@given(st.lists(reports, min_size=1, max_size=8))
def test_the_stored_tops_are_the_live_ones_and_resume_as_before(barriers):
    live = BoardRanking(K)
    for epoch, barrier in enumerate(barriers, start=1):
        stored = pickle.loads(pickle.dumps(live.state()))  # as Bytewax keeps it
        before = earlier_form(live)
        resumed, from_before = BoardRanking(K, stored), BoardRanking(K, pickle.loads(pickle.dumps(before)))
        assert resumed.local == live.local == from_before.local
        assert {bid: _decoded(b) for bid, b in stored["local"].items()} == live.local
        want = combine(live, epoch, barrier)
        assert combine(resumed, epoch, barrier) == want  # a resumed run goes on as the live one
        assert combine(from_before, epoch, barrier) == want
        assert resumed.local == live.local == from_before.local


def test_a_board_a_barrier_changed_is_stored_anew_and_the_others_as_they_were():
    ranking = BoardRanking(K)
    combine(ranking, 1, {"0": {("g1", "all"): ([("p1", 5, 1)], 1), ("g1", "best"): ([("p1", 5, 1)], 1)}})
    first = ranking.state()
    assert first is not None
    combine(ranking, 2, {"1": {("g1", "all"): ([("p2", 7, 2)], 1)}})
    second = ranking.state()
    assert second is not None
    assert second["local"][("g1", "best")] is first["local"][("g1", "best")]  # not encoded again
    assert _decoded(second["local"][("g1", "all")]) == {"0": ([("p1", 5, 1)], 1), "1": ([("p2", 7, 2)], 1)}


def test_without_recovery_nothing_is_stored():
    ranking = BoardRanking(K, recoverable=False)
    combine(ranking, 1, {"0": {("g1", "all"): ([("p1", 5, 1)], 1)}})
    assert ranking.state() is None
