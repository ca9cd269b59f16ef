"""The activity flow's state in Redis: each workspace a sorted set, written with the snapshot.

:class:`ActivityState` is the activity flow's :class:`connectors.redis_publish.ProductState`:
it turns an :class:`state.activity_snapshot.ActivitySnapshot` into the arguments of
``PUBLISH_ACTIVITY_LUA`` (layout in ``redis_keys``). Changes not yet in Redis wait for
the next snapshot Redis stores, newest count per channel.

Every execution's first snapshot is ``full`` (the counters send every count), so a
run resumed after Redis lost its data heals it at once. Redis losing its data *during*
a run stops the run with :class:`RedisLostActivity`: the counts live in the counter
partitions, and a restart (with the same ``--recovery-dir``) sends them all.
"""

from __future__ import annotations

from typing import Any

import orjson
import redis

from rankflow.connectors.redis_keys import Keys
from rankflow.connectors.redis_scripts import PUBLISH_ACTIVITY_LUA
from rankflow.state.activity_snapshot import ActivitySnapshot


class RedisLostActivity(RuntimeError):
    """Redis has no snapshot of the run's generation, and this process does not hold every count."""


class ActivityState:
    """Workspace count changes of the snapshots Redis has not stored yet."""

    script = PUBLISH_ACTIVITY_LUA

    def __init__(self) -> None:
        self._pending: dict[str, dict[str, int]] = {}
        self._full = False
        self._stale: list[str] = []  # full: the workspaces Redis holds that the snapshot does not name

    def remember(self, snapshot: ActivitySnapshot) -> None:
        if snapshot.full:
            self._pending = {ws: dict(channels) for ws, channels in snapshot.changed.items()}
            self._full = True
            return
        pending = self._pending
        for ws, channels in snapshot.changed.items():
            got = pending.get(ws)
            if got is None:
                pending[ws] = dict(channels)
            else:
                got.update(channels)  # a newer snapshot's count replaces the one waiting

    def resend_all(self) -> None:
        if not self._full:
            raise RedisLostActivity(
                "Redis has no snapshot of this run's activity rankings (it lost its data?): stopping. Start the "
                "run again with the same --recovery-dir: its first snapshot sends every count")

    def stored(self) -> None:
        self._pending, self._full, self._stale = {}, False, []

    def prepare(self, client: redis.Redis, k: Keys) -> None:
        """Before a ``full`` call: the workspaces Redis holds, so that the script can name them
        to remove them (a script must declare every key it touches). Only the generation's
        owner writes it, so nothing changes them between this read and the script."""
        if self._full:
            held = (ws.decode("utf-8", "surrogateescape") for ws in client.smembers(k.workspaces))
            self._stale = [ws for ws in held if ws not in self._pending]

    def keys(self, k: Keys) -> list[str]:
        stale = self._stale if self._full else []
        return [k.workspaces, *(k.workspace(ws) for ws in self._pending), *(k.workspace(ws) for ws in stale)]

    def args(self) -> list[Any]:
        args: list[Any] = ["full" if self._full else "delta", len(self._pending)]
        dumps = orjson.dumps
        for ws, channels in self._pending.items():
            args += (ws, dumps(channels))
        return args
