"""Rank change's arithmetic (``state.board_moves``) against boards recomputed whole.

Any board, then any change sets (new entries, entries moving up or down, an entry set to the
key it had): from the board now and only the moved entries, every player's rank at every
earlier state is the rank a full copy of that state gives, and an entry new since then has
none; chaining the moves of consecutive change sets is the moves since the first.
"""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from rankflow.state.board_index import BoardIndex, entry_fields, entry_key
from rankflow.state.board_moves import Moves

PLAYERS = ["a", "ab", "b", "é", "🎮", "z", "Z"]
entries = st.tuples(st.sampled_from(PLAYERS), st.integers(0, 4), st.integers(0, 3))
Board = dict[str, bytes]


def ranks(board: Board) -> dict[str, int]:
    """Each player's 0-based rank: keys sort in board order."""
    return {player: rank for rank, (player, _) in enumerate(sorted(board.items(), key=lambda e: e[1]))}


@settings(max_examples=400, deadline=None)
@given(start=st.lists(entries, max_size=8), change_sets=st.lists(st.lists(entries, max_size=6), max_size=5))
def test_the_ranks_at_every_earlier_state_from_the_moved_entries_alone(start, change_sets):
    board: Board = {player: entry_key(player, score, at) for player, score, at in start}
    index = BoardIndex.of(board.values())
    states, moves = [dict(board)], []
    for change_set in change_sets:
        moved = Moves()
        for player, score, at in change_set:
            key = entry_key(player, score, at)
            old = index.upsert(player, key)
            moved.record(player, old, key)
        moves.append(moved)
        states.append({entry_fields(key)[0]: key for key in index.entries.keys()})
    now = ranks(states[-1])
    for s, state in enumerate(states):
        since = Moves()
        for later in moves[s:]:
            since = since.then(later)
        then = ranks(state)
        for key in index.entries.keys():
            player = entry_fields(key)[0]
            expected = then[player] - now[player] if player in then else None
            assert since.gained(player, key, index.rank0(player), index.below) == expected, (s, player)
    index._check()
