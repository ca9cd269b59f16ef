"""A stream's client in the tests: it rebuilds the top from the events (``api.stream_diff``) as
a browser would, and checks it against the JSON route's answer of the same snapshot."""

from __future__ import annotations

from typing import Any

from rankflow.api import stream_diff

MOMENT = ("snapshot_id", "published_at", "age_ms", "stale")
"""What differs between two answers of one top read at two moments: a live run publishes at
every barrier, so the route read after an event may answer from a newer snapshot saying the
same (and whether an answer is stale is the route's, of the moment it is read)."""


class HeldTop:
    """What a client holds after the events it got: the answer's fields and its ``items``."""

    def __init__(self) -> None:
        self.answer: dict[str, Any] = {}
        self.items: list[dict[str, Any]] = []

    def apply(self, event: dict[str, Any]) -> dict[str, Any]:
        """Apply one event (its ``full``, ``changed`` and ``size``); the top it leaves."""
        assert not self.answer or event["full"] or event["snapshot_id"] > self.answer["snapshot_id"], event
        fields = list(event)  # an event with an age says whether it is stale right after it, as the routes do
        assert "age_ms" not in fields or (fields[fields.index("age_ms") + 1] == "stale"
                                          and isinstance(event["stale"], bool)), event
        self.items = stream_diff.apply(self.items, event)
        assert [e["rank"] for e in self.items] == list(range(1, event["size"] + 1)), self.items
        self.answer = {**{k: v for k, v in event.items() if k not in ("size", "changed", "removed", "full")},
                       "items": self.items}
        return self.answer

    def is_answer(self, answer: dict[str, Any]) -> bool:
        """Whether the top held is ``answer`` (the JSON route's) of its snapshot, or of a later one
        that says the same."""
        if answer["snapshot_id"] < self.answer["snapshot_id"]:
            return False
        return {k: v for k, v in answer.items() if k not in MOMENT} == \
            {k: v for k, v in self.answer.items() if k not in MOMENT}
