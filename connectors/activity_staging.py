"""Writing a large activity snapshot in short calls, so that readers never wait long.

A snapshot changes as many channels as the window's counts moved: when a bucket
leaves the window, every pair it held. Applied by one script, a hundred thousand
``ZADD`` hold Redis for tens of milliseconds, and every query arriving meanwhile
waits (the benchmark saw 40-96 ms). Readers must still see one snapshot at a time.
So each workspace has two sorted sets (slots ``a`` and ``b``, ``redis_keys``) and a
hash says which one readers read. A large snapshot is written into the other slots
by :func:`stage`, in calls of about :data:`STAGE_BUDGET` members each
(``scripts.STAGE_ACTIVITY``: a copy of the read slot, then the changes), while readers
go on reading the previous snapshot; then the publish script stores the snapshot and
switches the slots in one short step; :func:`drop` frees the previous slots after it.

A crash anywhere leaves readers on a whole snapshot: staged slots are invisible until
the switch, and the workspaces with one are in a set until :func:`drop` frees it, so
the next execution's first snapshot (``full``: it starts from no slots) removes
whatever a crash left.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import orjson
import redis

from rankflow.connectors.redis_generations import Fence
from rankflow.connectors.redis_keys import Keys
from rankflow.connectors.script_query import bind
from rankflow.connectors.scripts import DROP_ACTIVITY, STAGE_ACTIVITY

STAGE_BUDGET = 2_000
"""Members one staging call may copy and change, and the changes above which a snapshot
is staged at all: about 1-2 ms of Redis per call on these machines."""

DROP_PER_CALL = 500
"""Workspaces one call of ``scripts.DROP_ACTIVITY`` frees (``UNLINK``: freed off Redis's main
thread)."""


class Staged(NamedTuple):
    """Where :func:`stage` left a snapshot: the workspaces with a count and the slot each
    was written in, and those left without one."""

    present: list[tuple[str, str]]
    gone: list[str]


Item = tuple[str, str, bytes]
"""One piece of staging: (workspace id, ``copy``/``fresh``/``more``, changes as JSON)."""


def items(pending: dict[str, dict[str, int]], full: bool, budget: int) -> Iterator[Item]:
    """The workspaces' changes as staging items, a workspace with more than ``budget``
    changes in several (its first ``copy``, or ``fresh`` for a full snapshot; the rest
    ``more``), so that no call needs more than the budget.

    >>> list(items({"A": {"x": 1, "y": 2, "z": 0}, "B": {}}, False, 2))
    [('A', 'copy', b'{"x":1,"y":2}'), ('A', 'more', b'{"z":0}'), ('B', 'copy', b'{}')]
    """
    dumps = orjson.dumps
    start = "fresh" if full else "copy"
    for ws, channels in pending.items():
        if len(channels) <= budget:
            yield ws, start, dumps(channels)
            continue
        pairs = list(channels.items())
        for i in range(0, len(pairs), budget):
            yield ws, start if i == 0 else "more", dumps(dict(pairs[i:i + budget]))


def stage(client: redis.Redis, k: Keys, fence: Fence, pending: dict[str, dict[str, int]], full: bool,
          budget: int = STAGE_BUDGET) -> Staged:
    """Write ``pending`` into the slots readers do not read, in calls within ``budget``.

    Raises ``redis.ResponseError`` ``FENCED ...`` or ``SWITCHED ...`` (the publisher's
    errors) when the run no longer owns the generation."""
    script = bind(client, STAGE_ACTIVITY)
    todo = list(items(pending, full, budget))
    slot: dict[str, tuple[str, int]] = {}
    done = 0
    while done < len(todo):
        batch = todo[done:done + budget]  # the script stops at its budget: at most this many fit
        reply = script(*STAGE_ACTIVITY.ordered(
            staging_keys(k), {**fence._asdict(), "budget": budget},
            more_keys=[key for ws, _, _ in batch for key in k.workspace_both(ws)],
            more_argv=[x for item in batch for x in item]))
        for (ws, _, _), (written, members) in zip(batch, reply[1:]):
            slot[ws] = (written.decode(), members)  # a workspace's last item says whether it has members
        done += int(reply[0])
    return Staged([(ws, s) for ws, (s, members) in slot.items() if members],
                  [ws for ws, (_, members) in slot.items() if not members])


def drop(client: redis.Redis, k: Keys, fence: Fence, workspaces: list[str]) -> None:
    """Free the slot readers do not read of each of ``workspaces`` (after a switch: the
    previous rankings; after a refused snapshot: what was staged for it)."""
    script = bind(client, DROP_ACTIVITY)
    for i in range(0, len(workspaces), DROP_PER_CALL):
        part = workspaces[i:i + DROP_PER_CALL]
        script(*DROP_ACTIVITY.ordered(staging_keys(k), fence._asdict(),
                                      more_keys=[key for ws in part for key in k.workspace_both(ws)],
                                      more_argv=part))


def staging_keys(k: Keys) -> dict[str, str]:
    """The fixed ``KEYS`` of the staging scripts, by name."""
    return {"generation": k.generation, "owner": k.owner, "workspace_slots": k.workspace_slots,
            "workspaces_staged": k.workspaces_staged}
