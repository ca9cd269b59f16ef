"""The native ``KeyOrder`` (native/src/order.rs) against a sorted Python list: the board
index's order, every method the index uses, on generated changes."""

from __future__ import annotations

from bisect import bisect_left

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rankflow._native import KeyOrder

# keys of a few shared heads (16 bytes: score and reached_at) and short tails, so ties past
# the first 16 bytes and keys shorter than 16 bytes both come up
heads = st.sampled_from([b"", b"\x00", b"\x00" * 16, b"\x01" + b"\x00" * 15, b"\xff" * 16, b"\x00" * 15 + b"\x01"])
keys = st.builds(lambda h, t: h + t, heads, st.binary(max_size=3))
changes = st.lists(st.tuples(st.booleans(), keys), max_size=300)


@settings(max_examples=300, deadline=None)
@given(start=st.lists(keys, max_size=50), steps=changes, probes=st.lists(keys, max_size=20))
def test_key_order_is_a_sorted_set(start: list[bytes], steps: list[tuple[bool, bytes]], probes: list[bytes]) -> None:
    order = KeyOrder(start)
    model = sorted(set(start))
    for add, key in steps:
        if add:
            order.add(key)
            if key not in model:
                model.insert(bisect_left(model, key), key)
        elif key in model:
            order.remove(key)
            model.remove(key)
        else:
            with pytest.raises(ValueError):
                order.remove(key)
    order._check()
    assert len(order) == len(model) and order.keys() == model
    for key in probes + model[:5]:
        assert order.bisect_left(key) == bisect_left(model, key)
        if key in model:
            assert order.index(key) == model.index(key)
        else:
            with pytest.raises(ValueError):
                order.index(key)
    for at in range(-len(model), len(model)):
        assert order[at] == model[at]
    with pytest.raises(IndexError):
        order[len(model)]
    for lo in range(0, len(model) + 2, 7):
        assert order.islice(lo, lo + 9) == model[lo:lo + 9]


def test_many_keys_split_blocks() -> None:
    """Past a block's size (1,024 keys) the order splits blocks and stays exact."""
    model = [b"%020d" % i for i in range(0, 9000, 3)]
    order = KeyOrder(list(reversed(model)))
    for i in range(1, 9000, 3):
        order.add(b"%020d" % i)
    model = sorted(model + [b"%020d" % i for i in range(1, 9000, 3)])
    order._check()
    assert order.keys() == model
    for i in range(0, 9000, 2):
        if i % 3 != 2:  # the keys there
            order.remove(b"%020d" % i)
    order._check()
    model = [k for k in model if int(k) % 2]
    assert order.keys() == model and order.islice(100, 110) == model[100:110]
    assert order.bisect_left(b"%020d" % 4501) == bisect_left(model, b"%020d" % 4501)


@pytest.mark.parametrize("entries", [1, 2, 3, 7, 8, 200, 1000, 1001])
def test_a_player_answer_has_every_rank_and_percentile_as_python_writes_them(entries: int) -> None:
    """``player_answer``'s numbers against the Python functions (``connectors.board_pages.percentile``
    and orjson for the float; both ranks against the key's order), for every rank of boards of a
    few sizes, scores shared by runs of entries."""
    import orjson

    from rankflow.connectors.board_pages import percentile
    from rankflow.state.board_index import entry_key

    keys = sorted(entry_key(f"p{i}", 1000 - i // 3, i) for i in range(entries))
    order = KeyOrder(keys)
    for rank, key in enumerate(keys, start=1):
        made = order.player_answer(key, b'{"age_ms":', b',"player_id":', b'"x"', 0, 10**15)
        answer = orjson.loads(made)
        score = 1000 - (rank - 1) // 3
        assert (answer["score"], answer["rank"], answer["competition_rank"]) == (score, rank, 3 * (1000 - score) + 1)
        assert made.endswith(b'"percentile":%s}' % orjson.dumps(percentile(rank, entries)))
        assert answer["stale"] is False and answer["age_ms"] > 0
