"""Reading the activity rankings: a workspace's top, the global top, one channel.

Every query is one Lua script (``redis_scripts.ACTIVITY_READ_LUA``), so the snapshot
id, the window and every item of an answer come from one state: the publish script
changes the workspaces' sorted sets and the snapshot id in one atomic step. A
channel's rank is ``ZREVRANK`` + 1 in its workspace's sorted set: exact for every
channel, not only the top ``K_max``.

The reader keeps the newest snapshot document it has read, and the script returns
the document only when the snapshot id moved: a query in a steady state is one
small round trip.
"""

from __future__ import annotations

from typing import Any

import json

import redis

from rankflow.connectors.redis_keys import Keys, activity_namespace
from rankflow.connectors.redis_scripts import ACTIVITY_READ_LUA, MOVES

WINDOW_FIELDS = ("window_start", "window_end", "watermark")


class ActivityQueryError(LookupError):
    """A query without an answer: nothing published yet, or the channel has no count."""


class NoSnapshot(ActivityQueryError):
    pass


class NoCount(ActivityQueryError):
    pass


def check_k(k: int, k_max: int) -> None:
    """A usage error (ValueError) unless 1 <= k <= K_max (WINDOWS.md 4: never clamped)."""
    if not 1 <= k <= k_max:
        raise ValueError(f"k must be between 1 and K_max = {k_max}, got {k}")


class ActivityReader:
    """Queries on a sync client (the CLI, tests)."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.client = client
        self.keys = Keys(activity_namespace(namespace))
        self.generation = 0
        self.doc: dict[str, Any] | None = None
        self._script = client.register_script(ACTIVITY_READ_LUA)

    def _call(self, query: str, workspace: str = "", k: int = 0, channel: str = "") -> tuple[dict[str, Any], Any]:
        for _ in range(MOVES + 1):
            keys = self.keys.of_generation(self.generation)
            held = str(self.doc["snapshot_id"]) if self.doc else ""
            reply = self._script(keys=[keys.generation, keys.snapshot_id, keys.snapshot, keys.workspace(workspace)],
                                 args=[self.generation, held, query, k, channel])
            if reply[0] == b"moved":
                self.generation, self.doc = int(reply[1]), None
                continue
            if reply[0] == b"none":
                raise NoSnapshot("no activity snapshot published yet in this namespace")
            if reply[2]:
                self.doc = json.loads(reply[2])  # not orjson: a watermark may be beyond 64 bits (WINDOWS.md 1)
            assert self.doc is not None and str(self.doc["snapshot_id"]) == reply[1].decode()
            return self.doc, reply[3] if len(reply) > 3 else None
        raise RuntimeError("the generation changed at every read: a rebuild switching in a loop?")

    def top(self, workspace: str, k: int) -> dict[str, Any]:
        """``{snapshot_id, workspace_id, window_start, window_end, watermark, items}`` (WINDOWS.md 6)."""
        if k < 1:
            check_k(k, 1)
        doc, pairs = self._call("top", workspace, k)
        check_k(k, doc["k_max"])
        items = [{"rank": i, "channel_id": pairs[2 * i - 2].decode(), "count": int(float(pairs[2 * i - 1]))}
                 for i in range(1, len(pairs) // 2 + 1)]
        return {"snapshot_id": doc["snapshot_id"], "workspace_id": workspace,
                **{f: doc[f] for f in WINDOW_FIELDS}, "items": items}

    def global_top(self, k: int) -> dict[str, Any]:
        """The global ranking's first ``k`` from the snapshot document."""
        if k < 1:
            check_k(k, 1)
        doc, _ = self._call("global")
        check_k(k, doc["k_max"])
        return {"snapshot_id": doc["snapshot_id"], **{f: doc[f] for f in WINDOW_FIELDS}, "items": doc["global"][:k]}

    def channel(self, workspace: str, channel: str) -> dict[str, Any]:
        """``{snapshot_id, workspace_id, channel_id, count, rank}``; :class:`NoCount` when it has none."""
        doc, found = self._call("channel", workspace, 0, channel)
        if not found:
            raise NoCount(f"channel {channel!r} of workspace {workspace!r} has no count in the window of "
                          f"snapshot {doc['snapshot_id']}")
        count, rank = found
        return {"snapshot_id": doc["snapshot_id"], "workspace_id": workspace, "channel_id": channel,
                "count": int(float(count)), "rank": int(rank) + 1}
