"""The activity flow's state in Redis: each workspace a sorted set, written with the snapshot.

:class:`ActivityState` is the activity flow's :class:`connectors.redis_publish.ProductState`:
it turns an :class:`state.activity_snapshot.ActivitySnapshot` into the arguments of
``scripts.PUBLISH_ACTIVITY`` (layout in ``redis_keys``), staging a large one first
(``activity_staging``). Changes not yet in Redis wait for the next snapshot Redis
stores, newest count per channel.

Every execution's first snapshot is ``full`` (the counters send every count), so a
run resumed after Redis lost its data heals it at once. Redis losing its data, or going back
to an older backup, *during* a run stops the run with :class:`RedisLostActivity`: the counts live in the counter
partitions, and a restart (with the same ``--recovery-dir``) sends them all.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any, cast

import orjson
import redis

from rankflow.connectors.activity_staging import STAGE_BUDGET, Staged, drop, stage
from rankflow.connectors.redis_generations import Fence
from rankflow.connectors.redis_keys import Keys
from rankflow.connectors.redis_publish import merge_pending
from rankflow.connectors.redis_replies import Members
from rankflow.connectors.scripts import PUBLISH_ACTIVITY
from rankflow.operators.metrics import METRICS
from rankflow.state.activity_snapshot import ActivitySnapshot

log = logging.getLogger("rankflow.publisher")


class RedisLostActivity(RuntimeError):
    """Redis has no snapshot of the run's generation, and this process does not hold every count."""


STAGE_EVERY_S = float(os.environ.get("RANKFLOW_STAGE_EVERY_S", 10.0))
"""At most one staged snapshot in this many seconds: a live run has a large snapshot once
a minute (a bucket leaving the window), a backlog's catch-up one at every barrier, where
staging them all would triple Redis's work and hold the flow back. (Tests set 0 through
``RANKFLOW_STAGE_EVERY_S`` to stage every large snapshot.)"""


class ActivityState:
    """Workspace count changes of the snapshots Redis has not stored yet.

    ``stage_at``: a snapshot changing more channels than this is staged
    (``connectors.activity_staging``: written where readers do not look, in calls of
    about that many members, then switched by the publish script in one short step)
    unless the publisher is behind; a smaller one is applied by the publish script
    itself. 0 applies every snapshot in one script (readers wait while a large one is
    written).
    """

    script = PUBLISH_ACTIVITY

    def __init__(self, stage_at: int = STAGE_BUDGET, stage_every_s: float | None = None) -> None:
        self._pending: dict[str, dict[str, int]] = {}
        self._full = False
        self._stale: list[str] = []  # full: the workspaces Redis holds that the snapshot does not name
        self._stage_at = stage_at
        self._staged: Staged | None = None
        self._drop: list[str] = []  # staged workspaces whose other slot is to be freed
        self._hurried = False  # the last large snapshot went in one script: the publisher was behind
        self._stage_every_s = STAGE_EVERY_S if stage_every_s is None else stage_every_s
        self._last_staged = -float("inf")

    def remember(self, snapshot: ActivitySnapshot) -> None:
        if snapshot.full:
            self._pending = {ws: dict(channels) for ws, channels in snapshot.changed.items()}
            self._full = True
            return
        merge_pending(self._pending, snapshot.changed)

    def resend_all(self, why: str) -> None:
        if not self._full:
            raise RedisLostActivity(
                f"{why}: stopping. Start the run again with the same --recovery-dir: its first snapshot sends "
                "every count")

    def stored(self) -> None:
        self._pending, self._full, self._stale = {}, False, []

    def prepare(self, client: redis.Redis, k: Keys, fence: Fence, hurry: bool = False) -> None:
        """Before each call of the publish script: free what an earlier call left staged;
        for a ``full`` call, read the workspaces Redis holds (or a crash left staged), so
        that the script can name them to remove them (a script must declare every key
        it touches; only the generation's owner writes them, so nothing changes them
        before the script); and stage a large snapshot, unless in a ``hurry``: staging
        costs Redis several times the work of one script (it copies the workspaces), and
        when the publisher is behind (a backlog's catch-up) storing snapshots soonest
        matters more than short calls; nor more often than every :data:`STAGE_EVERY_S`."""
        self.finish(client, k, fence)
        self._staged = None
        if self._full:
            def named(key: str) -> set[str]:
                members = cast(Members, client.smembers(key))
                return {w.decode("utf-8", "surrogateescape") for w in members}
            left = named(k.workspaces_staged)  # by a run that stopped before freeing them
            self._stale = [ws for ws in named(k.workspaces) | left if ws not in self._pending]
            self._drop = sorted(left | set(self._stale))  # freed after the script, and out of the set
        changes = sum(map(len, self._pending.values()))
        how = self._how(changes, hurry)
        METRICS.publishes[how] += 1
        if how == "staged":
            started = time.perf_counter()
            self._drop += self._pending  # whatever the script answers, the other slots are freed next
            self._staged = stage(client, k, fence, self._pending, self._full, self._stage_at)
            self._last_staged = time.monotonic()
            log.info("staged %d channel changes of %d workspaces in %.0f ms", changes, len(self._pending),
                     (time.perf_counter() - started) * 1000)

    def _how(self, changes: int, hurry: bool) -> str:
        """``direct`` (small), ``staged``, or one script because the publisher is behind
        (``hurried``) or staged one less than :data:`STAGE_EVERY_S` ago (``spaced``)."""
        if not self._stage_at or changes <= self._stage_at:
            return "direct"
        if hurry and not self._hurried:  # once per spell: a backlog's catch-up hurries every snapshot
            log.info("storing large snapshots in one script while the publisher is behind (first: %d channel "
                     "changes)", changes)
        elif self._hurried and not hurry:
            log.info("the publisher keeps up again: large snapshots are staged")
        self._hurried = hurry
        if hurry:
            return "hurried"
        if time.monotonic() - self._last_staged < self._stage_every_s:
            return "spaced"
        return "staged"

    def finish(self, client: redis.Redis, k: Keys, fence: Fence) -> None:
        """After the publish script: free the slots it switched away from (or, if it did
        not store the snapshot, the staged ones; the next call stages again)."""
        if self._drop:
            drop(client, k, fence, self._drop)
            self._drop = []

    def keys(self, k: Keys) -> list[str]:
        both = k.workspace_both
        stale = [key for ws in self._stale for key in both(ws)] if self._full else []
        fixed = PUBLISH_ACTIVITY.product_keys(workspaces=k.workspaces, workspace_slots=k.workspace_slots)
        if self._staged is None:
            return [*fixed, *(key for ws in self._pending for key in both(ws)), *stale]
        return [*fixed, *(key for ws in self._staged.gone for key in both(ws)), *stale]

    def args(self) -> list[Any]:
        full = "full" if self._full else "delta"
        if self._staged is None:
            pending = self._pending
            return [*PUBLISH_ACTIVITY.at_p(full=full, direct=len(pending)), *pending,
                    orjson.dumps(pending) if pending else b"{}", 0, 0]
        present, gone = self._staged
        return [*PUBLISH_ACTIVITY.at_p(full=full, direct=0), b"{}", len(present),
                *(x for pair in present for x in pair), len(gone), *gone]
