"""The streams' diff (``api.stream_diff``): applying the event of any two tops to the first gives
the second, it carries no entry the client already has at its rank, and nothing when nothing changed."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from rankflow.api import stream_diff

KEYS = st.sampled_from(["a", "b", "c", "d", "e", "f", "g", "h"])  # few: tops share entries often


@st.composite
def tops(draw: Any) -> list[dict[str, Any]]:
    """A top as a stream's answer holds it: distinct keys, ranks 1..n, a count each."""
    keys = draw(st.lists(KEYS, unique=True, max_size=8))
    return [{"rank": i + 1, "id": key, "count": draw(st.integers(0, 3))} for i, key in enumerate(keys)]


@given(tops(), tops())
def test_applying_the_diff_of_two_tops_to_the_first_gives_the_second(first, second):
    changes = stream_diff.diff(first, second, "id")
    if changes is None:
        assert first == second
        return
    assert changes["full"] is False and changes["size"] == len(second)
    assert stream_diff.apply(first, changes) == second
    held = {entry["rank"]: entry for entry in first}
    assert all(held.get(entry["rank"]) != entry for entry in changes["changed"]), "only what changed"
    assert changes["removed"] == [e["id"] for e in first if e["id"] not in {n["id"] for n in second}]


@given(tops(), tops())
def test_a_full_event_gives_the_top_whatever_the_client_held(held, top):
    changes = stream_diff.diff(None, top, "id")
    assert changes == {"size": len(top), "changed": top, "removed": [], "full": True}
    assert stream_diff.apply(held, changes) == top


def test_an_event_is_the_answer_but_its_items_and_names_its_snapshot():
    answer = {"snapshot_id": 9, "board": "all", "items": [{"rank": 1, "id": "a", "count": 2}]}
    body = stream_diff.event([{"rank": 1, "id": "b", "count": 1}], answer, "id")
    assert body == {"snapshot_id": 9, "board": "all", "size": 1, "changed": answer["items"], "removed": ["b"],
                    "full": False}
    assert stream_diff.event(answer["items"], answer, "id") is None
    assert stream_diff.message("board", 9, {"x": 10**30}) == b'event: board\nid: 9\ndata: {"x":%d}\n\n' % 10**30
