"""The user stage: one contribution per user (``stateful_batch`` keyed by ``user_id``).

Contract:

* **Input**: :data:`EventBatch` items, ``(source partition, epoch, events)``, one
  per batch and key, events in arrival order per user (one user's events come
  from one source partition along one path), keyed one of three ways
  (``--shard-by``, ``--user-shards``):

  - **by input partition** (the default, ``operators.keyed_shards.PartitionShardRouter``):
    one shard per source partition, on the worker that read it; the state a dict of the
    partition's users;
  - **by user shard** (``--shard-by user``, :class:`ShardRouter`, and with the sweeper):
    the key is ``crc32(user_id) % N`` and the state a dict of that shard's users;
  - **by user** (``--user-shards 0``): one key per ``user_id``.

  Why shards, and how their recovery works (changelogs): ``operators.keyed_shards``.

* **State**: per user the :class:`state.rules.UserRecord`, and for a user whose
  contribution sits on a partial counter of a split song the salt of that counter
  (``operators.routing``; most users have none). The salt alone names the partial
  counter ``(song, salt)``, so the later -1 finds it whatever the routing is by
  then. A user whose events never created a record (only heartbeats, timers) is not
  kept; records are otherwise kept forever, as docs/semantics/listeners.md section 2 requires.
  Recovery state stores a user as its record, with its salt as a sixth field when it
  has one (``state.rules.from_stored``), in snapshots that carry their format
  (``operators.keyed_shards.FORMAT``); state stored before then, records from before
  section 6 (no ``last_active``) among them, still loads (``state.rules.from_legacy``). A heartbeat that moves ``last_active`` changes the
  record but not the counts: it is stored (and written to the changelog) with
  nothing sent downstream.
* **Output**, keyed like the input: one :class:`NetChanges` per call (the runtime's
  cost is per item): the batch's song changes summed per counter ``(song, salt)``,
  with the epoch they belong to, and a ``DeadLetter`` for every conflict. A user's
  contribution leaves the song of its old record (on the recorded salt) and joins
  the song of its new one (on the salt chosen now): ``state.rules.changes``, summed
  in place here because this loop runs once per event. With recent plays on, the
  :class:`NetChanges` also carries the batch's accepted starts (per bucket of ``ts``, their songs): the
  ``START`` events that made a new record that plays (docs/semantics/listeners.md 3 rule 5, verdicts
  ``started`` and ``switched``), for ``operators.recent_plays``. A ``TIMEOUT`` that removes
  a playback (``timed_out``) leaves its song like a ``STOP``; one that does not is no
  dead letter (``state.rules.apply_timeout``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
import time
from collections import deque
from typing import Any, NamedTuple

from rankflow.connectors.changelog import Position
from rankflow.connectors.kafka import KafkaEndpoint
from rankflow.connectors.timeout_producer import producer_for
from rankflow.operators.keyed_shards import RESUMED, ShardItems, ShardLogic, ShardRouter, ShardSnapshot, shard_key, shard_of
from rankflow.operators.metrics import METRICS
from rankflow.operators.song_keys import BUCKET_MS, HOT_SONGS, HotSongs, user_salt
from rankflow.state.events import DeadLetter, Event
from rankflow.state.events import START, TIMEOUT
from rankflow.state.rules import (CONFLICT_DETAILS, LAST_ACTIVE, PLAYBACK_ID, PLAYING, SONG_ID, VERSION, Verdict,
                                  apply_event, from_legacy, from_stored)
from rankflow.state.timers import Progress, Timers, sweep

EventBatch = tuple[str, int, list[Event]]
"""``(source partition, epoch, events)``: plain tuples and lists, so an item that
crosses to a worker in another process pickles in C (named tuples pickle through
Python-level calls, twice as slow)."""


Starts = dict[int, list[str]]
"""Accepted starts of a batch: per bucket of ``ts`` the songs started, one entry a start (the
combine step counts them in C; a ``(song, bucket)`` tuple a start would cost an allocation)."""


class NetChanges(NamedTuple):
    """A batch's song changes in ``epoch``: ``(song, salt) -> [delta, user_delta, changes]``
    (``changes``: how many accepted changes were summed, the load the hot-song rule measures),
    and with recent plays on its accepted starts, the songs started per bucket of ``ts``
    (``operators.recent_plays``)."""

    epoch: int
    counts: dict[tuple[str, int], list[int]]
    starts: Starts | None = None


Decision = NetChanges | DeadLetter

VERDICTS: dict[str, int] = dict.fromkeys(Verdict.ALL, 0)
"""Per-process tally of what events did (duplicates, superseded, ...), for metrics."""
METRICS.verdicts = VERDICTS

Snapshot = tuple[Any, ...]  # a stored user: its record [+ salt] (state.rules.from_stored); older forms: from_legacy

__all__ = ["EventBatch", "NetChanges", "ShardRouter", "SweeperConfig", "SweepingShardLogic", "UserShardLogic", "select_conflicts", "shard_key", "shard_of"]


class UserShardLogic(ShardLogic):
    """One key per user shard: the state maps each of the shard's users to its record
    (recovery, sharding: ``operators.keyed_shards``)."""

    __slots__ = ("salts", "hot", "tally", "recent")

    def __init__(self, resume: Position | ShardSnapshot | Snapshot | None, changelog: Path | None,
                 shards: int, whole: bool = False, hot: HotSongs = HOT_SONGS, recent: bool = False) -> None:
        """``recent``: hand on accepted starts for recent plays (``operators.recent_plays``)."""
        self.hot = hot
        self.tally = VERDICTS
        self.recent = recent
        self.salts: dict[str, int] = {}  # users counted on a partial counter: its salt
        super().__init__(resume, changelog, shards, whole)

    def _load(self, flat: dict[str, Snapshot | list[Any]], read: Any = from_stored) -> None:
        """Records as this code stores them (changelogs store lists: ``state.rules.from_stored``)
        and their salts; ``read``: how to read one stored user."""
        users, salts = self.records, self.salts
        for user, snap in flat.items():
            users[user], salt = read(snap)
            if salt:
                salts[user] = salt

    def _load_legacy(self, flat: dict[str, Snapshot | list[Any]]) -> None:
        """Records in any form recovery state held them before it carried its format
        (``state.rules.from_legacy``)."""
        self._load(flat, from_legacy)

    def _flat(self, users: Iterable[str]) -> dict[str, tuple[Any, ...]]:
        """The records of ``users``, each with its salt when it has one (rare: split songs)."""
        records, salts = self.records, self.salts
        if not salts:
            return {u: records[u] for u in users}
        return {u: (*records[u], salts[u]) if u in salts else records[u] for u in users}

    def on_batch(self, batches: list[EventBatch]) -> tuple[list[Decision], bool]:
        """Bytewax hands ``on_batch`` the items of one epoch at a time: one
        :class:`NetChanges` sums all of a call's changes."""
        if RESUMED in self.records:  # a resumed user learns its id from its first event
            self._rename(batches[0][2][0][0])
        out: list[Decision] = []
        net: dict[tuple[str, int], list[int]] = {}
        starts: Starts | None = {} if self.recent else None
        epoch = batches[0][1]
        for partition, batch_epoch, events in batches:
            if batch_epoch != epoch:  # not what Bytewax does; if it ever did, keep epochs apart
                out.append(NetChanges(epoch, net, starts))
                net, epoch = {}, batch_epoch
                starts = {} if self.recent else None
            self._apply(partition, epoch, events, net, out, starts)
        self._saw_epoch(epoch)
        if net:
            out.append(NetChanges(epoch, net, starts))
        return out, not self.records

    def _apply(self, partition: str, epoch: int, events: list[Event], net: dict[tuple[str, int], list[int]],
               out: list[Decision], starts: Starts | None = None) -> None:
        """The rules for every event of a batch, in arrival order; the changes summed per counter into ``net``,
        and each accepted start's song appended to its bucket's list in ``starts`` (unless it is None)."""
        self.source = partition
        users, salts, tally, changed = self.records, self.salts, self.tally, self.changed
        hot, conflicts, get, heartbeat = self.hot.hot, Verdict.CONFLICTS, users.get, Verdict.HEARTBEAT
        in_bucket: list[str] = []  # the list of the last start's bucket: a batch's starts are mostly in one
        last_bucket, bucket_ms = None, BUCKET_MS
        for uid, playback, song, etype, version, ts, offset, raw, idle_ms in events:
            old = get(uid)
            new, verdict = apply_event(old, playback, song, version, etype, ts, idle_ms)
            tally[verdict] += 1
            if new is old:
                if verdict in conflicts:
                    out.append(DeadLetter(verdict, CONFLICT_DETAILS[verdict], partition, offset, raw, epoch))
                continue
            users[uid] = new
            if changed is not None:
                changed.add(uid)
            if verdict == heartbeat:  # last_active moved: the same contribution, nothing to count
                continue
            was = old is not None and old[PLAYING]
            playing = new[PLAYING]  # type: ignore[index]
            if was:  # the contribution leaves the old song, from the counter it was added to
                key = (old[SONG_ID], salts.pop(uid, 0) if salts else 0)  # type: ignore[index]
                acc = net.get(key)
                if acc is None:
                    net[key] = [-1, 0 if playing else -1, 1]
                else:
                    acc[0] -= 1
                    acc[1] -= 0 if playing else 1
                    acc[2] += 1
            if playing:  # ... and joins the new one, on a partial counter if the song is split
                if starts is not None:  # a new record that plays: a START of a newer playback (rule 5)
                    b = ts // bucket_ms  # its bucket (``state.window_rules.bucket``)
                    if b != last_bucket:
                        last_bucket, in_bucket = b, starts.setdefault(b, [])
                    in_bucket.append(song)
                salt = 0
                if song in hot:
                    salt = salts[uid] = user_salt(uid, self.hot.salts)
                acc = net.get((song, salt))
                if acc is None:
                    net[(song, salt)] = [1, 0 if was else 1, 1]
                else:
                    acc[0] += 1
                    acc[1] += 0 if was else 1
                    acc[2] += 1

    def _rename(self, uid: str) -> None:
        self._rename_resumed(uid)
        if RESUMED in self.salts:
            self.salts[uid] = self.salts.pop(RESUMED)


class SweeperConfig(NamedTuple):
    """The sweeper of docs/semantics/listeners.md 6 (``rankflow run --idle-timeout-ms``)."""

    idle_ms: int  # T: a counted playback idle this long is timed out
    quiet_ms: int  # --idle-timeout: a partition with nothing to read this long counts as processed up to now - this
    endpoint: KafkaEndpoint  # the input topic, where TIMEOUT events go


ARMING = frozenset((START, TIMEOUT))
"""Events after which a playing record of the same playback is armed (``SweepingShardLogic``)."""


class SweepingShardLogic(UserShardLogic):
    """A user shard with the sweeper of docs/semantics/listeners.md 6.

    Its items are ``(partition, epoch, events, mark)`` and every batch of every input
    partition reaches it (``operators.keyed_shards.MarkingShardRouter``), so after
    applying a call's events it knows how far the input is processed
    (``state.timers.Progress``). A playback is armed (``state.timers.Timers``) at
    ``last_active + T`` when a ``START`` makes it the counted one, and every playing
    record a resumed shard restores is armed (timers are not stored: the records are).
    Heartbeats arm nothing: a due candidate is re-checked against its record and
    re-armed at its new deadline. A due playback gets a ``TIMEOUT`` with ``ts`` = the
    progress value (>= its deadline) written to the input and is not armed until its
    ``TIMEOUT`` is read back: if that one leaves it playing (a heartbeat came first),
    or Kafka did not take it, it is armed again; after a crash every playing record is.
    A second ``TIMEOUT`` of a closed playback changes nothing (``state.rules.apply_timeout``).
    """

    __slots__ = ("sweeper", "progress", "timers", "producer", "undelivered")

    def __init__(self, resume: Position | ShardSnapshot | Snapshot | None, changelog: Path | None,
                 shards: int, whole: bool = False, hot: HotSongs = HOT_SONGS, recent: bool = False,
                 sweeper: SweeperConfig | None = None) -> None:
        if sweeper is None:
            raise ValueError("SweepingShardLogic needs a SweeperConfig")
        self.sweeper = sweeper
        self.progress = Progress(sweeper.quiet_ms)
        self.timers = Timers()
        self.producer = producer_for(sweeper.endpoint)
        self.undelivered: deque[str] = deque()  # users whose TIMEOUT Kafka did not take (filled by callbacks)
        super().__init__(resume, changelog, shards, whole, hot, recent)
        T = sweeper.idle_ms
        self.timers.arm_all((u, r[LAST_ACTIVE] + T) for u, r in self.records.items() if r[PLAYING] and u != RESUMED)
        METRICS.timer_wheels.add(self.timers)

    def on_batch(self, batches: list[ShardItems]) -> tuple[list[Decision], bool]:
        out: list[Decision] = []
        net: dict[tuple[str, int], list[int]] = {}
        starts: Starts | None = {} if self.recent else None
        epoch = batches[0][1]
        records, arm, mark, T = self.records, self.timers.arm, self.progress.mark, self.sweeper.idle_ms
        for partition, batch_epoch, events, source_mark in batches:
            if batch_epoch != epoch:
                if net:
                    out.append(NetChanges(epoch, net, starts))
                net, epoch = {}, batch_epoch
                starts = {} if self.recent else None
            if events:
                if RESUMED in records:
                    self._rename(events[0][0])
                self._apply(partition, epoch, events, net, out, starts)
                for ev in events:  # arm the playbacks a START made the counted one, and those a TIMEOUT left
                    if ev[3] in ARMING:  # playing (it lost a race to a heartbeat: it fired, nothing is armed)
                        rec = records.get(ev[0])
                        if rec is not None and rec[PLAYING] and rec[PLAYBACK_ID] == ev[1]:
                            arm(ev[0], rec[LAST_ACTIVE] + T)
            mark(source_mark)
        self._saw_epoch(epoch)
        self._fire()
        if net:
            out.append(NetChanges(epoch, net, starts))
        return out, False

    def _fire(self) -> None:
        """Write a ``TIMEOUT`` for every due playback (docs/semantics/listeners.md 6)."""
        producer = self.producer
        upto = self.progress.value(int(time.time() * 1000))
        undelivered, T = self.undelivered, self.sweeper.idle_ms
        while undelivered:  # due again at once (re-checked like any candidate)
            self.timers.arm(undelivered.popleft(), 0)
        if upto is not None:
            fired = sweep(self.timers, self.records, T, upto)
            send, delivered = producer.send, self._delivered
            for uid, rec in fired:
                send(uid, rec[PLAYBACK_ID], rec[SONG_ID], rec[VERSION], upto, T, delivered)
            METRICS.timeouts_fired += len(fired)
        producer.poll()  # delivery reports, also when nothing fires

    def _delivered(self, err: object, msg: Any) -> None:
        """Delivery report of one of this shard's ``TIMEOUT`` events (any worker's thread may call it)."""
        if err is not None:
            self.producer.failed += 1
            self.undelivered.append(msg.key().decode())

    def on_eof(self) -> tuple[list[Decision], bool]:
        self.producer.flush()
        return [], False


def select_conflicts(items: list[tuple[str, Decision]]) -> list[tuple[str, DeadLetter]]:
    """``flat_map_batch`` mapper: the conflicts, for the dead-letter output."""
    conflicts = [(d.partition, d) for _, d in items if isinstance(d, DeadLetter)]
    for _, d in conflicts:
        METRICS.dead_letters[d.reason] += 1
    return conflicts
