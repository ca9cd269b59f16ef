"""The native ``BoardKeys`` (native/src/order.rs) against a dict and a sorted list: the
board index's entries, every method the index uses, on generated changes."""

from __future__ import annotations

from bisect import bisect_left

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rankflow._native import BoardKeys
from rankflow.connectors.board_pages import percentile
from rankflow.state.board_index import entry_key

# few scores and times, so ties of the first 16 bytes are decided by the player's bytes
players = st.sampled_from(["a", "ab", "b", "é", "🎮", "z", "Z", "clan/zoe", "", "a\x00"])
entries = st.tuples(players, st.integers(0, 3), st.integers(0, 2))



@settings(max_examples=300, deadline=None)
@given(start=st.dictionaries(players, st.tuples(st.integers(0, 3), st.integers(0, 2))),
       steps=st.lists(entries, max_size=300), probes=st.lists(entries, max_size=20))
def test_board_keys_are_a_dict_and_a_sorted_list(start: dict[str, tuple[int, int]],
                                                 steps: list[tuple[str, int, int]],
                                                 probes: list[tuple[str, int, int]]) -> None:
    model = {p: entry_key(p, score, at) for p, (score, at) in start.items()}
    board = BoardKeys(list(model.values()))
    for player, score, at in steps:
        key = entry_key(player, score, at)
        assert board.upsert(key) == model.get(player)
        model[player] = key
    board._check()
    ordered = sorted(model.values())
    assert len(board) == len(model) and board.keys() == ordered
    for player, score, at in probes:
        key = entry_key(player, score, at)
        assert board.bisect_left(key) == bisect_left(ordered, key)
        assert board.key(player) == model.get(player)
        assert board.rank0(player) == (ordered.index(model[player]) if player in model else None)
    for at in range(-len(ordered), len(ordered)):
        assert board[at] == ordered[at]
    with pytest.raises(IndexError):
        board[len(ordered)]
    for lo in range(0, len(ordered) + 2, 3):
        assert board.islice(lo, lo + 4) == ordered[lo:lo + 4]


def test_bad_keys_are_refused() -> None:
    """A key shorter than its 16 bytes of score and time, or two keys of one player."""
    with pytest.raises(ValueError, match="16 bytes"):
        BoardKeys().upsert(b"short")
    with pytest.raises(ValueError, match="one key per player"):
        BoardKeys([entry_key("a", 1, 1), entry_key("a", 2, 1)])


def test_many_keys_split_blocks() -> None:
    """Past a block's size (1,024 keys) the order splits blocks and stays exact."""
    board = BoardKeys([entry_key(f"p{i}", i % 50, i) for i in range(0, 9000, 3)])
    for i in range(1, 9000, 3):
        board.upsert(entry_key(f"p{i}", i % 50, i))
    for i in range(0, 9000, 6):  # every other first one moves up
        board.upsert(entry_key(f"p{i}", 60, i))
    board._check()
    model = {f"p{i}": entry_key(f"p{i}", 60 if i % 6 == 0 else i % 50, i) for i in range(9000) if i % 3 != 2}
    ordered = sorted(model.values())
    assert board.keys() == ordered and board.islice(100, 110) == ordered[100:110]
    assert board.rank0("p4501") == ordered.index(model["p4501"])


@pytest.mark.parametrize("entries", [1, 2, 3, 7, 8, 200, 1000, 1001])
def test_a_player_answer_has_every_rank_and_percentile_as_python_writes_them(entries: int) -> None:
    """``player_answer``'s numbers against the Python functions (``connectors.board_pages.percentile``
    and orjson for the float; both ranks against the keys' order), for every rank of boards of a
    few sizes, scores shared by runs of three entries."""
    keys = sorted(entry_key(f"p{i}", 1000 - i // 3, i) for i in range(entries))
    board = BoardKeys(keys)
    assert board.player_answer("nobody", b"{", b"", b"", 0, 0) is None
    for rank in range(1, entries + 1):
        player = f"p{rank - 1}"
        made = board.player_answer(player, b'{"age_ms":', b',"player_id":', orjson.dumps(player), 0, 10**15)
        assert made is not None
        answer = orjson.loads(made)
        score = 1000 - (rank - 1) // 3
        assert (answer["player_id"], answer["score"], answer["rank"], answer["competition_rank"]) == (
            player, score, rank, 3 * (1000 - score) + 1)
        assert made.endswith(b'"percentile":%s}' % orjson.dumps(percentile(rank, entries)))
        assert answer["stale"] is False and answer["age_ms"] > 0


@settings(max_examples=200, deadline=None)
@given(player=st.text(max_size=12), target=st.binary(max_size=80), stale=st.booleans())
def test_a_player_reply_is_the_answer_and_the_validators_python_makes(player: str, target: bytes,
                                                                     stale: bool) -> None:
    """``player_reply``: ``player_answer``'s body with the id written as orjson writes it (every
    escape), and the lines ``api.http_cache`` makes for the target: the tag's digest is
    ``hashlib.blake2s(target, digest_size=6)``, the end fresh or stale as the answer says."""
    import hashlib

    from rankflow.api.http_cache import tag_parts

    board = BoardKeys([entry_key(player, 5, 1), entry_key(player + "x", 7, 1)])
    bound = -1 if stale else 10**15
    parts = tag_parts(9, 3, b"no-cache")
    future = 2**62  # published after now: an age of 0 (the two calls read the clock)
    made = board.player_reply(player, b'{"age_ms":', b',"player_id":', future, bound, target, *parts)
    assert made is not None
    body, lines = made
    assert body == board.player_answer(player, b'{"age_ms":', b',"player_id":', orjson.dumps(player), future, bound)
    assert orjson.loads(body)["stale"] is stale
    digest = hashlib.blake2s(target, digest_size=6).hexdigest().encode()
    assert lines == parts[0] + digest + parts[2 if stale else 1]
    assert board.player_reply(player + "y", b"{", b"", 0, 0, target, *parts) is None
