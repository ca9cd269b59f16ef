"""The events of the live streams: a top's first event whole, then only what changed.

Contract (docs/http.md, "Resuming a stream"), the same for every product's stream (the
listeners' ``ranking``, the boards' ``board``, the activity's ``activity`` events): an event
is the fields of the product's JSON answer of that snapshot but its ``items`` (its
``snapshot_id`` and what else it names: a board, a window, a total), and

* ``full``: true when ``changed`` is the whole top (a stream's first event, a resumed
  stream whose ``Last-Event-ID`` this process does not know), false when it is only what
  changed since the previous event the client got;
* ``changed``: the entries whose rank is new or holds another entry (or the same entry
  with another score or count) than before, each with its ``rank``;
* ``removed``: the keys (a song's, a player's, a channel's id: the product's ``key``
  field) of the entries that left the top;
* ``size``: how many entries the top holds now.

A client keeps its top as a list by rank: it replaces each changed rank's entry and cuts the
list to ``size`` (:func:`apply`); ``removed`` says who left, it is not needed to rebuild the
list. Ranks are positions, 1 to ``size`` (each product's ``rank`` is: ties are told apart by
the product's order, docs/semantics). Why diffs: a top of 10 whose one entry gained a point
was 10 entries on the wire at every change; it is one now, and a reconnecting client gets
only what changed while it was away (``api.sse.History`` keeps what each snapshot sent).

This module knows no product: each gives its key field and its event's name.
"""

from __future__ import annotations

from typing import Any

from rankflow.connectors.redis_publish import dumps_document

Entry = dict[str, Any]


def diff(previous: list[Entry] | None, items: list[Entry], key: str) -> dict[str, Any] | None:
    """``changed``, ``removed``, ``size`` and ``full`` that take a client from ``previous`` to
    ``items`` (the whole of ``items`` when there is no ``previous``); None when nothing changed.

    >>> diff([{"rank": 1, "id": "a"}, {"rank": 2, "id": "b"}], [{"rank": 1, "id": "b"}], "id")
    {'size': 1, 'changed': [{'rank': 1, 'id': 'b'}], 'removed': ['a'], 'full': False}
    """
    if previous is None:
        return {"size": len(items), "changed": list(items), "removed": [], "full": True}
    changed = [entry for i, entry in enumerate(items) if i >= len(previous) or previous[i] != entry]
    now = {entry[key] for entry in items}
    removed = [entry[key] for entry in previous if entry[key] not in now]
    if not changed and not removed and len(items) == len(previous):
        return None
    return {"size": len(items), "changed": changed, "removed": removed, "full": False}


def event(previous: list[Entry] | None, answer: dict[str, Any], key: str,
          items: str = "items") -> dict[str, Any] | None:
    """The event of ``answer`` (a product's JSON answer: its ``items`` the top) for a client
    holding ``previous`` (None: nothing, a full event); None when it changes nothing."""
    changes = diff(previous, answer[items], key)
    if changes is None:
        return None
    return {**{name: value for name, value in answer.items() if name != items}, **changes}


def message(name: str, snapshot_id: int, body: dict[str, Any]) -> bytes:
    """``body`` as the SSE event ``name``, the snapshot id as its ``id`` (what a client resumes from)."""
    return b"event: %s\nid: %d\ndata: %s\n\n" % (name.encode(), snapshot_id, dumps_document(body))


def apply(held: list[Entry], changes: dict[str, Any], rank: str = "rank") -> list[Entry]:
    """A client's top after an event (``full`` or not): what the streams' clients do.

    >>> apply([{"rank": 1, "id": "a"}, {"rank": 2, "id": "b"}],
    ...       {"size": 1, "changed": [{"rank": 1, "id": "b"}], "removed": ["a"], "full": False})
    [{'rank': 1, 'id': 'b'}]
    """
    if changes["full"]:
        return list(changes["changed"])
    by_rank = {entry[rank]: entry for entry in held}
    by_rank.update({entry[rank]: entry for entry in changes["changed"]})
    return [by_rank[r] for r in range(1, changes["size"] + 1)]
