"""The user stage: one contribution per user (``stateful_batch`` keyed by ``user_id``).

Contract:

* **Input**: events in arrival order per user (one user's events come from one
  source partition along one path), keyed one of two ways (``--user-shards``):

  - **by user shard** (:class:`UserShardLogic`, the default): the key is
    ``crc32(user_id) % N`` and the state a dict of that shard's users. Each input
    item is the list of one batch's events for the shard. The runtime's cost is per
    key and item (a Python call for ``on_batch``, ``notify_at`` and ``snapshot``, a
    keyed exchange), so per-batch shards carry the same rules at about half the
    flow's cost (1M events: 12.8 s -> 7.2 s). With recovery a shard's snapshot is a
    position in its changelog (``connectors.changelog``), which holds the records
    that changed at each barrier: Bytewax would otherwise store the whole shard.
  - **by user** (:class:`UserLogic`, ``--user-shards 0``): one key per ``user_id``;
    with recovery Bytewax stores every touched user at every barrier.

* **State**: per user the :class:`state.rules.UserRecord`, and for a user whose
  contribution sits on a partial counter of a split song the salt of that counter
  (``operators.routing``; most users have none). The salt alone names the partial
  counter ``(song, salt)``, so the later -1 finds it whatever the routing is by
  then. A user whose events never created a record (only heartbeats) is not kept;
  records are otherwise kept forever, as SEMANTICS.md section 2 requires. Recovery
  state stores a user as a flat 5-tuple ``(version, playback_id, song_id, playing,
  salt)``: pickling it is ten times cheaper than named tuples.
* **Output**, keyed like the input: one :class:`NetChanges` per call (the runtime's
  cost is per item): the batch's song changes summed per counter ``(song, salt)``,
  with the epoch they belong to, and a ``DeadLetter`` for every conflict. A user's
  contribution leaves the song of its old record (on the recorded salt) and joins
  the song of its new one (on the salt chosen now): ``state.rules.changes``, summed
  in place here because this loop runs once per event.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

from bytewax.operators import StatefulBatchLogic

from rankflow.connectors.changelog import Position, ShardChangelog
from rankflow.operators.metrics import METRICS
from rankflow.operators.routing import HOT_SONGS, HotSongs, user_salt
from rankflow.state.events import DeadLetter, PlaybackEvent
from rankflow.state.rules import CONFLICT_DETAILS, UserRecord, Verdict, apply_event


class NetChanges(NamedTuple):
    """A batch's song changes in ``epoch``: ``(song, salt) -> [delta, user_delta, changes]``
    (``changes``: how many accepted changes were summed, the load the hot-song rule measures)."""

    epoch: int
    counts: dict[tuple[str, int], list[int]]


Decision = NetChanges | DeadLetter

VERDICTS: dict[str, int] = dict.fromkeys(Verdict.ALL, 0)
"""Per-process tally of what events did (duplicates, superseded, ...), for metrics."""
METRICS.verdicts = VERDICTS

Snapshot = tuple[int, str, str, bool, int]  # (version, playback_id, song_id, playing, salt)
ShardSnapshot = dict[str, Snapshot]
"""A whole shard, as recovery state stored it before the changelog (still resumed from)."""


class UserShardLogic(StatefulBatchLogic[list[PlaybackEvent], Decision, Position | None]):
    """One key per user shard: the state maps each of the shard's users to its record.

    With recovery (``changelog`` set) the shard keeps the users that changed since
    the last barrier, and its snapshot appends just those to the shard's changelog
    and hands Bytewax the changelog's position (``connectors.changelog``): a barrier
    costs what changed in it, not the whole shard.
    """

    __slots__ = ("users", "salts", "hot", "tally", "changelog", "changed", "shards", "epoch", "_directory")

    def __init__(self, resume: Position | ShardSnapshot | None, hot: HotSongs, changelog: Path | None,
                 shards: int) -> None:
        self.hot = hot
        self.tally = VERDICTS
        self.shards = shards
        self.epoch = 0  # of the last events seen
        self.users: dict[str, UserRecord] = {}
        self.salts: dict[str, int] = {}  # users counted on a partial counter: its salt
        self.changelog: ShardChangelog | None = None
        self.changed: set[str] | None = None if changelog is None else set()
        self._directory = changelog
        if isinstance(resume, tuple) and changelog is not None:
            self.changelog = ShardChangelog(changelog, resume[1])
            self._load(self.changelog.restore(resume))
        elif isinstance(resume, dict):
            self._load(resume)
            if self.changed is not None:
                self.changed.update(self.users)  # the first barrier writes all of them to the changelog

    def _load(self, flat: dict[str, Snapshot]) -> None:
        for user, snap in flat.items():
            self.users[user] = UserRecord(*snap[:4])
            if snap[4]:  # [4], not [4:]: state from before the routing version was dropped has a sixth field
                self.salts[user] = snap[4]

    def _flat(self, user: str) -> Snapshot:
        return (*self.users[user], self.salts.get(user, 0))

    @classmethod
    def builder(cls, changelog: Path | None = None, shards: int = 1,
                hot: HotSongs = HOT_SONGS) -> Callable[[Position | ShardSnapshot | None], "UserShardLogic"]:
        """``changelog``: the directory of the shards' changelogs (recovery on), or None."""
        return lambda resume: cls(resume, hot, changelog, shards)

    def on_batch(self, groups: list[list[PlaybackEvent]]) -> tuple[list[Decision], bool]:
        return self._apply(groups), not self.users

    def _apply(self, groups: Iterable[list[PlaybackEvent]]) -> list[Decision]:
        """The rules for every event, in arrival order; the changes summed per counter.

        Bytewax hands ``on_batch`` the items of one epoch at a time, so one
        :class:`NetChanges` carries the epoch of them all.
        """
        out: list[Decision] = []
        net: dict[tuple[str, int], list[int]] = {}
        users, salts, tally, changed = self.users, self.salts, self.tally, self.changed
        hot, conflicts, get, ev = self.hot.hot, Verdict.CONFLICTS, users.get, None
        for events in groups:
            for ev in events:
                uid = ev.user_id
                old = get(uid)
                new, verdict = apply_event(old, ev.playback_id, ev.song_id, ev.version, ev.type)
                tally[verdict] += 1
                if new is old:
                    if verdict in conflicts:
                        out.append(DeadLetter(verdict, CONFLICT_DETAILS[verdict], ev.partition, ev.offset, ev.raw,
                                              ev.epoch))
                    continue
                users[uid] = new  # type: ignore[assignment]
                if changed is not None:
                    changed.add(uid)
                was = old is not None and old.playing
                if was:  # the contribution leaves the old song, from the counter it was added to
                    key = (old.song_id, salts.pop(uid, 0) if salts else 0)  # type: ignore[union-attr]
                    acc = net.get(key)
                    if acc is None:
                        net[key] = [-1, 0 if new.playing else -1, 1]  # type: ignore[union-attr]
                    else:
                        acc[0] -= 1
                        acc[1] -= 0 if new.playing else 1  # type: ignore[union-attr]
                        acc[2] += 1
                if new.playing:  # ... and joins the new one, on a partial counter if the song is split
                    song, salt = new.song_id, 0  # type: ignore[union-attr]
                    if song in hot:
                        salt = salts[uid] = user_salt(uid, self.hot.salts)
                    acc = net.get((song, salt))
                    if acc is None:
                        net[(song, salt)] = [1, 0 if was else 1, 1]
                    else:
                        acc[0] += 1
                        acc[1] += 0 if was else 1
                        acc[2] += 1
        if ev is not None:
            self._saw_epoch(ev.epoch)
            if net:
                out.append(NetChanges(ev.epoch, net))
        return out

    def _saw_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch = epoch
            if self.changelog is not None:
                self.changelog.release(epoch)

    def snapshot(self) -> Position | None:
        if self.changed is None:
            return None  # no recovery: nobody reads snapshots
        log = self.changelog
        if log is None:
            if not self.users:
                return None  # only heartbeats of unknown users so far: nothing to keep
            first = next(iter(self.users))
            log = self.changelog = ShardChangelog(self._directory, shard_key(shard_of(first, self.shards)))
            log.restore(None)
        flat = self._flat
        position = log.append({u: flat(u) for u in self.changed},
                              lambda: {u: flat(u) for u in self.users}, self.epoch)
        self.changed.clear()
        return position


RESUMED = ""
"""Where a resumed user's record waits for its id: Bytewax's builder is not told the
key, and its first event will (never a real id: ids have 1 to 256 characters)."""


class UserLogic(UserShardLogic):
    """One key per user (``--user-shards 0``): a shard of one user, whom Bytewax
    snapshots whole at every barrier the user was active in."""

    __slots__ = ("recoverable",)

    def __init__(self, resume: Snapshot | None, hot: HotSongs, recoverable: bool) -> None:
        super().__init__(None, hot, None, 1)
        self.recoverable = recoverable
        if resume is not None:
            self._load({RESUMED: resume})

    @classmethod
    def builder(cls, recoverable: bool = False,  # type: ignore[override]
                hot: HotSongs = HOT_SONGS) -> Callable[[Snapshot | None], "UserLogic"]:
        return lambda resume: cls(resume, hot, recoverable)

    def on_batch(self, events: list[PlaybackEvent]) -> tuple[list[Decision], bool]:  # type: ignore[override]
        if RESUMED in self.users:
            uid = events[0].user_id
            self.users[uid] = self.users.pop(RESUMED)
            if RESUMED in self.salts:
                self.salts[uid] = self.salts.pop(RESUMED)
        return self._apply((events,)), not self.users

    def snapshot(self) -> Snapshot | None:  # type: ignore[override]
        if not self.users or not self.recoverable:
            return None
        return self._flat(next(iter(self.users)))


def shard_of(user_id: str, shards: int) -> int:
    """The user's shard: stable across processes and runs (unlike ``hash()``)."""
    return zlib.crc32(user_id.encode()) % shards


def shard_key(shard: int) -> str:
    return f"users-{shard}"


class ShardRouter:
    """``flat_map`` mapper: a batch's ``(user_id, event)`` pairs -> one item per user shard.

    A user's shard is :func:`shard_of`. Order within a shard's list is the batch's
    order, so each user's events keep their arrival order.
    """

    __slots__ = ("shards", "keys")

    def __init__(self, shards: int) -> None:
        if shards < 1:
            raise ValueError("user shards must be >= 1")
        self.shards = shards
        self.keys = [shard_key(i) for i in range(shards)]

    def __call__(self, events: list[tuple[str, PlaybackEvent]]) -> list[tuple[str, list[PlaybackEvent]]]:
        groups: dict[int, list[PlaybackEvent]] = {}
        n = self.shards
        for user, ev in events:
            shard = shard_of(user, n)
            group = groups.get(shard)
            if group is None:
                groups[shard] = [ev]
            else:
                group.append(ev)
        keys = self.keys
        return [(keys[shard], group) for shard, group in groups.items()]


def select_conflicts(items: list[tuple[str, Decision]]) -> list[tuple[str, DeadLetter]]:
    """``flat_map_batch`` mapper: the conflicts, for the dead-letter output."""
    conflicts = [(d.partition, d) for _, d in items if d.__class__ is DeadLetter]
    for _, d in conflicts:
        METRICS.dead_letters[d.reason] += 1
    return conflicts
