"""The ordered indexes of the counter stages (state.ranking_index) and the one merge of local tops.

Every random operation sequence runs against a small reference model written from the
contracts (docs/semantics), and the index's ``_check()`` runs after every step."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rankflow.state.ranking_index import (COUNT_THEN_ID_DESCENDING, SCORE_THEN_FIRST_REACHED, OrderedIndex,
                                          RetakenTop, RetractableIndex, merge_local_tops)
from tests.board_counter_model import KernelTop, MonotoneTop

TOPS = pytest.mark.parametrize("Top", [MonotoneTop, KernelTop], ids=["model", "kernel"])
"""The boards' bounded top: the kernel's (native/src/board_table.rs) and its Python oracle."""


def reference_top(counts: dict[str, int], k: int) -> list[tuple[str, int]]:
    live = [(s, c) for s, c in counts.items() if c > 0]
    return sorted(live, key=lambda sc: (sc[1], sc[0].encode()), reverse=True)[:k]


def test_top_orders_by_count_then_song_id_descending():
    idx = RetractableIndex()
    idx.apply([("b", 2), ("a", 2), ("c", 5), ("song_10", 1), ("song_9", 1)])
    assert idx.top(10) == [("c", 5), ("b", 2), ("a", 2), ("song_9", 1), ("song_10", 1)]
    assert idx.top(2) == [("c", 5), ("b", 2)]


def test_zero_leaves_the_index():
    idx = RetractableIndex()
    idx.apply([("a", 1), ("b", 1)])
    idx.apply([("a", -1)])
    assert idx.top(5) == [("b", 1)] and len(idx) == 1 and idx.count("a") == 0
    assert idx.counts() == {"b": 1}


def test_negative_is_reported_and_kept_not_clamped():
    idx = RetractableIndex()
    assert idx.apply([("a", -1)]) == [("a", -1)]
    assert idx.total == -1 and idx.top(5) == [] and idx.count("a") == -1
    idx.apply([("a", 2)])
    assert idx.top(5) == [("a", 1)]


@given(st.lists(st.tuples(st.sampled_from("abcdefgh"), st.integers(-3, 3))), st.integers(1, 10))
def test_index_matches_a_sorted_dict(changes, k):
    idx, counts = RetractableIndex(), {}
    for song, delta in changes:
        idx.apply([(song, delta)])
        counts[song] = counts.get(song, 0) + delta
    assert idx.top(k) == reference_top(counts, k)
    assert idx.total == sum(counts.values())


@given(st.lists(st.dictionaries(st.sampled_from(["a", "b", "c", "d", "é", "song_1", "song_10"]),
                                st.integers(0, 4), max_size=5), max_size=12))
def test_rank_and_set_counts_match_the_ranking_order(updates):
    idx, counts = RetractableIndex(), {}
    for update in updates:
        idx.set_counts(update)
        counts.update(update)
    order = [song for song, _ in reference_top(counts, len(counts))]
    for song in ["a", "b", "c", "d", "é", "song_1", "song_10"]:
        expected = order.index(song) + 1 if song in order else None
        assert idx.rank(song) == expected, song
        assert idx.count(song) == counts.get(song, 0)


@given(st.dictionaries(st.text(min_size=1, max_size=3), st.integers(1, 6), max_size=40),
       st.integers(1, 5), st.integers(1, 8))
def test_merging_local_top_k_lists_gives_the_global_top_k(counts, partitions, k):
    """A song lives in one partition, or is split (partition ``partitions``): the split songs'
    complete counts enter as one more list, in order."""
    parts = [RetractableIndex() for _ in range(partitions)]
    split = []
    for song, c in counts.items():
        p = random.Random(song).randrange(partitions + 1)
        if p == partitions:
            split.append((song, c))
        else:
            parts[p].apply([(song, c)])
    tops = [*(p.top(k) for p in parts), COUNT_THEN_ID_DESCENDING.sort(split)]
    assert merge_local_tops(tops, k, COUNT_THEN_ID_DESCENDING) == reference_top(counts, k)


@TOPS
@given(st.integers(1, 5), st.lists(st.tuples(st.sampled_from("abcdefg"), st.integers(0, 3), st.integers(-2, 2)),
                                   max_size=80))
def test_a_bounded_board_top_is_the_top_of_all_entries_while_entries_only_rise(Top, k, steps):
    """The top keeps only k entries; since an entry only ever moves up (a score rises, or
    at an equal score reached_at gets earlier), its top is always the whole board's."""
    top, board = Top(k), {}
    for player, rise, earlier in steps:
        score, at = board.get(player, (0, 100))
        new = (score + rise, at if rise else at - abs(earlier)) if player in board else (rise, 100 + earlier)
        board[player] = new
        assert top.offer(player, *new)
        expected = sorted(((p, s, a) for p, (s, a) in board.items()), key=lambda e: (-e[1], e[2], e[0]))[:k]
        assert top.top(k) == expected
    if board:
        worst = max(board, key=lambda p: board[p])
        s, a = board[worst]
        if worst in {p for p, _, _ in top.top(k)}:
            assert not top.offer(worst, s - 1, a), "an entry that gets worse is refused"


def change_table(counts: dict, changes: list) -> dict:
    """Add ``(key, delta)`` changes to a table of counts, never below 0 (0 leaves it); the
    changed keys with their counts now, as a :class:`RetakenTop` is told them."""
    changed = {}
    for key, delta in changes:
        n = max(0, counts.get(key, 0) + delta)
        if n:
            counts[key] = n
        else:
            counts.pop(key, None)
        changed[key] = n
    return changed


@given(steps=st.lists(st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d", "é", "song_10", "song_9"]),
                                         st.integers(-3, 6)), max_size=5), max_size=30),
       capacity=st.integers(1, 4))
def test_retaken_top_is_the_best_of_the_table_after_every_update(steps, capacity):
    """Counts that mostly grow, sometimes fall or leave: the top is always the reference's."""
    counts: dict[str, int] = {}
    top = RetakenTop(capacity)
    for changes in steps:
        top.update(change_table(counts, changes), counts)
        top._check(counts)
        assert top.top(capacity) == reference_top(counts, capacity)
        assert top.top(1) == reference_top(counts, 1)
    assert RetakenTop(capacity, counts).top(capacity) == reference_top(counts, capacity)


# -- operation sequences against reference models, with _check() after every step ------------

KEYS = ["a", "b", "c", "d", "é", "song_1", "song_10", "song_9"]
PAIRS = [("w", "zz"), ("w!", "a"), ("w", "a"), ("é", "c1"), ("x", "c10"), ("x", "c9")]


def board_order(entries):
    """docs/semantics/boards.md 4: score descending, reached_at ascending, player_id ascending byte-wise."""
    return sorted(entries, key=lambda e: (-e[1], e[2], e[0].encode()))


def pair_order(counts: dict) -> list:
    """docs/semantics/windows.md 4: count descending, then workspace_id, then channel_id descending byte-wise."""
    live = [(p, c) for p, c in counts.items() if c > 0]
    return sorted(live, key=lambda pc: (pc[1], pc[0][0].encode(), pc[0][1].encode()), reverse=True)


def check(index: OrderedIndex, expected: list) -> None:
    """What every index owes: its invariants, its top in its class's order, its length."""
    assert isinstance(index, OrderedIndex)
    index._check()
    whole = index.top(len(index))
    order = type(index).order
    assert whole == order.sort(whole)
    for k in (1, 2, len(index) + 1):
        assert index.top(k) == expected[:k]


@given(st.lists(st.one_of(
    st.tuples(st.just("apply"), st.dictionaries(st.sampled_from(KEYS), st.integers(-3, 3), max_size=4)),
    st.tuples(st.just("set"), st.dictionaries(st.sampled_from(KEYS), st.integers(0, 4), max_size=4))), max_size=40))
def test_retractable_index_matches_a_count_map_after_every_step(steps):
    idx, counts = RetractableIndex(), {}
    for op, arg in steps:
        if op == "apply":  # net changes: one per key
            negative = idx.apply(arg.items())
            for key, delta in arg.items():
                counts[key] = counts.get(key, 0) + delta
            assert sorted(negative) == sorted((k, counts[k]) for k, d in arg.items() if d and counts[k] < 0)
        else:
            idx.set_counts(arg)
            counts.update(arg)
        expected = reference_top(counts, len(counts))
        check(idx, expected)
        assert idx.counts() == {k: c for k, c in counts.items() if c}
        assert idx.total == sum(counts.values()) and len(idx) == len(expected)
        order = [k for k, _ in expected]
        for key in KEYS:
            assert idx.count(key) == counts.get(key, 0)
            assert idx.rank(key) == (order.index(key) + 1 if key in order else None)
    check(RetractableIndex(idx.counts()), reference_top(counts, len(counts)))


@TOPS
@given(st.integers(1, 4), st.lists(st.tuples(st.sampled_from(KEYS), st.booleans(), st.integers(0, 3),
                                             st.integers(-2, 2)), max_size=60))
def test_monotone_top_is_the_best_of_the_board_after_every_offer(Top, capacity, steps):
    """Entries improve (the contract); now and then one that is held gets worse: it is refused
    and nothing changes."""
    top, board = Top(capacity), {}
    for player, worse, rise, shift in steps:
        held = {p for p, _, _ in top.top(capacity)}
        if worse and player in held:
            score, at = board[player]
            bad = (score - 1, at) if rise else (score, at + 1 + abs(shift))
            assert top.offer(player, *bad) is False
        else:
            if player in board:
                score, at = board[player]
                new = (score + rise, at + shift) if rise else (score, at - abs(shift))
            else:
                new = (rise, 100 + shift)
            board[player] = new
            assert top.offer(player, *new) is True
        check(top, board_order([(p, s, a) for p, (s, a) in board.items()])[:capacity])
        assert len(top) == min(capacity, len(board))


@TOPS
@given(st.integers(1, 4), st.lists(st.tuples(st.sampled_from(KEYS), st.integers(-5, 5), st.integers(0, 20)),
                                   max_size=60))
def test_monotone_top_stays_sound_whatever_it_is_offered(Top, capacity, offers):
    """Outside the contract (entries that get worse unseen) the answer may be wrong, never the structure;
    and the kernel answers as its oracle does, offer by offer."""
    top, oracle = Top(capacity), MonotoneTop(capacity)
    for offer in offers:
        assert top.offer(*offer) == oracle.offer(*offer)
        top._check()
        assert top.top(capacity) == oracle.top(capacity)


@given(st.integers(1, 4), st.lists(st.lists(st.tuples(st.sampled_from(PAIRS), st.integers(-3, 6)), max_size=4),
                                   max_size=40))
def test_retaken_top_of_pairs_after_every_update(capacity, steps):
    """The activity flow's keys are (workspace, channel) pairs: ("w!", "a") ranks before ("w", "zz")."""
    counts: dict = {}
    top = RetakenTop(capacity)
    for changes in steps:
        top.update(change_table(counts, changes), counts)
        top._check(counts)
        check(top, pair_order(counts)[:capacity])
    check(RetakenTop(capacity, counts), pair_order(counts)[:capacity])


# -- the merge of local tops, in each contract's order -------------------------------------------

@given(st.dictionaries(st.sampled_from(PAIRS), st.integers(1, 6)), st.integers(1, 4), st.integers(1, 6))
def test_merging_window_tops_gives_the_global_pair_order(counts, partitions, k):
    parts = [{} for _ in range(partitions)]
    for (ws, ch), c in counts.items():  # a workspace lives in one partition
        parts[random.Random(ws).randrange(partitions)][(ws, ch)] = c
    tops = [RetakenTop(k, part).top(k) for part in parts]
    assert merge_local_tops(tops, k, COUNT_THEN_ID_DESCENDING) == pair_order(counts)[:k]


@given(st.dictionaries(st.sampled_from(KEYS), st.tuples(st.integers(0, 3), st.integers(0, 3))),
       st.integers(1, 4), st.integers(1, 6))
def test_merging_board_tops_gives_the_first_to_reach_a_score_first(board, partitions, k):
    parts = [KernelTop(k) for _ in range(partitions)]
    for player, (score, at) in board.items():  # a player lives in one partition
        parts[random.Random(player).randrange(partitions)].offer(player, score, at)
    merged = merge_local_tops([p.top(k) for p in parts], k, SCORE_THEN_FIRST_REACHED)
    assert merged == board_order([(p, s, a) for p, (s, a) in board.items()])[:k]


def test_merge_keeps_the_tie_orders_of_the_contracts():
    assert merge_local_tops([[("a", 2)], [("b", 2)]], 2, COUNT_THEN_ID_DESCENDING) == [("b", 2), ("a", 2)]
    assert merge_local_tops([[(("w", "zz"), 1)], [(("w!", "a"), 1)]], 2, COUNT_THEN_ID_DESCENDING) == [
        (("w!", "a"), 1), (("w", "zz"), 1)]
    assert merge_local_tops([[("b", 5, 1)], [("a", 5, 2)], [("c", 5, 1)]], 3, SCORE_THEN_FIRST_REACHED) == [
        ("b", 5, 1), ("c", 5, 1), ("a", 5, 2)]


# -- the invariant checks find what is broken -----------------------------------------------------

def test_retractable_check_finds_a_count_map_out_of_step():
    idx = RetractableIndex({"a": 2, "b": 1})
    idx._counts["a"] = 3  # the sorted list still says 2
    with pytest.raises(AssertionError):
        idx._check()
    idx = RetractableIndex({"a": 2})
    idx._total = 5
    with pytest.raises(AssertionError):
        idx._check()


def test_monotone_check_finds_a_wrong_floor_and_order():
    top = MonotoneTop(2, [("a", 3, 0), ("b", 2, 0)])
    top._floor = (-3, 0, "a")
    with pytest.raises(AssertionError):
        top._check()
    top = MonotoneTop(3, [("a", 3, 0), ("b", 2, 0)])
    top._index.reverse()
    with pytest.raises(AssertionError):
        top._check()


def test_retaken_check_finds_a_key_left_out():
    counts = {"a": 3, "b": 2, "c": 1}
    top = RetakenTop(2, counts)
    counts["c"] = 9  # a change the top was never told of
    with pytest.raises(AssertionError):
        top._check(counts)
    top = RetakenTop(3, {"a": 1})
    with pytest.raises(AssertionError):
        top._check({"a": 1, "b": 1})  # room left, and a key not held
