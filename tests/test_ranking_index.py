"""The song partition's ordered index (state.ranking_index) and the global merge."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from rankflow.state.ranking_index import SongIndex
from rankflow.state.snapshot import merge_local_tops


def reference_top(counts: dict[str, int], k: int) -> list[tuple[str, int]]:
    live = [(s, c) for s, c in counts.items() if c > 0]
    return sorted(live, key=lambda sc: (sc[1], sc[0].encode()), reverse=True)[:k]


def test_top_orders_by_count_then_song_id_descending():
    idx = SongIndex()
    idx.apply([("b", 2), ("a", 2), ("c", 5), ("song_10", 1), ("song_9", 1)])
    assert idx.top(10) == [("c", 5), ("b", 2), ("a", 2), ("song_9", 1), ("song_10", 1)]
    assert idx.top(2) == [("c", 5), ("b", 2)]


def test_zero_leaves_the_index():
    idx = SongIndex()
    idx.apply([("a", 1), ("b", 1)])
    idx.apply([("a", -1)])
    assert idx.top(5) == [("b", 1)] and idx.active_songs == 1 and idx.count("a") == 0
    assert idx.counts() == {"b": 1}


def test_negative_is_reported_and_kept_not_clamped():
    idx = SongIndex()
    assert idx.apply([("a", -1)]) == [("a", -1)]
    assert idx.total == -1 and idx.top(5) == [] and idx.count("a") == -1
    idx.apply([("a", 2)])
    assert idx.top(5) == [("a", 1)]


@given(st.lists(st.tuples(st.sampled_from("abcdefgh"), st.integers(-3, 3))), st.integers(1, 10))
def test_index_matches_a_sorted_dict(changes, k):
    idx, counts = SongIndex(), {}
    for song, delta in changes:
        idx.apply([(song, delta)])
        counts[song] = counts.get(song, 0) + delta
    assert idx.top(k) == reference_top(counts, k)
    assert idx.total == sum(counts.values())


@given(st.lists(st.dictionaries(st.sampled_from(["a", "b", "c", "d", "é", "song_1", "song_10"]),
                                st.integers(0, 4), max_size=5), max_size=12))
def test_rank_and_set_counts_match_the_ranking_order(updates):
    idx, counts = SongIndex(), {}
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
    parts = [SongIndex() for _ in range(partitions)]
    for song, c in counts.items():
        parts[random.Random(song).randrange(partitions)].apply([(song, c)])
    assert merge_local_tops((p.top(k) for p in parts), k) == reference_top(counts, k)


@given(st.integers(1, 5), st.lists(st.tuples(st.sampled_from("abcdefg"), st.integers(0, 3), st.integers(-2, 2)),
                                   max_size=80))
def test_a_bounded_board_top_is_the_top_of_all_entries_while_entries_only_rise(k, steps):
    """BoardTop keeps only k entries; since an entry only ever moves up (a score rises, or
    at an equal score reached_at gets earlier), its top is always the whole board's."""
    from rankflow.state.ranking_index import BoardTop

    top, board = BoardTop(k), {}
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


@given(steps=st.lists(st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d", "é", "song_10", "song_9"]),
                                         st.integers(-3, 6)), max_size=5), max_size=30),
       capacity=st.integers(1, 4))
def test_count_top_is_the_best_of_the_table_after_every_update(steps, capacity):
    """Counts that mostly grow, sometimes fall or leave: the top is always the reference's."""
    from rankflow.state.ranking_index import CountTop

    counts: dict[str, int] = {}
    top = CountTop(capacity)
    for changes in steps:
        changed = {}
        for song, delta in changes:
            n = max(0, counts.get(song, 0) + delta)
            if n:
                counts[song] = n
            else:
                counts.pop(song, None)
            changed[song] = n
        top.update(changed, counts)
        assert top.top(capacity) == reference_top(counts, capacity)
        assert top.top(1) == reference_top(counts, 1)
    assert CountTop(capacity, counts).top(capacity) == reference_top(counts, capacity)
