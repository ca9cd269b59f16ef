"""The user stage: one contribution per user (``stateful_batch`` keyed by ``user_id``).

Contract:

* **Input**: ``(user_id, PlaybackEvent)``, in arrival order per user (one user's
  events come from one source partition along one path).
* **State**: one :class:`state.rules.UserRecord` per user, or none. A user whose
  events never created a record (only heartbeats) is discarded at once; records are
  otherwise kept forever, as SEMANTICS.md section 2 requires. The snapshot is the
  record itself: an immutable 4-tuple, so snapshots stay cheap at millions of keys.
* **Output**, still keyed by ``user_id``: ``(song_partition_key, SongDelta)`` for
  every song change the rules accept, and a ``DeadLetter`` for every conflict.
  Every output carries the epoch of the event that caused it, so the song
  counters know which barrier a change belongs to.
"""

from __future__ import annotations

from collections.abc import Callable

from bytewax.operators import StatefulBatchLogic

from operators.song_counter import SongDelta, partition_key
from state.events import DeadLetter, PlaybackEvent
from state.rules import CONFLICT_DETAILS, UserRecord, apply_event

Decision = tuple[str, SongDelta] | DeadLetter


class UserLogic(StatefulBatchLogic[PlaybackEvent, Decision, UserRecord | None]):
    __slots__ = ("record", "song_partitions")

    def __init__(self, record: UserRecord | None, song_partitions: int) -> None:
        self.record = record
        self.song_partitions = song_partitions

    @classmethod
    def builder(cls, song_partitions: int) -> Callable[[UserRecord | None], "UserLogic"]:
        return lambda resume: cls(resume, song_partitions)

    def on_batch(self, events: list[PlaybackEvent]) -> tuple[list[Decision], bool]:
        out: list[Decision] = []
        record, parts = self.record, self.song_partitions
        for ev in events:
            record, changes, verdict = apply_event(
                record, ev.playback_id, ev.song_id, ev.version, ev.type
            )
            for song, delta, user_delta in changes:
                out.append((partition_key(song, parts), (ev.epoch, song, delta, user_delta)))
            if not changes and verdict in CONFLICT_DETAILS:
                out.append(
                    DeadLetter(
                        verdict.value, CONFLICT_DETAILS[verdict], ev.partition, ev.offset, ev.raw, ev.epoch
                    )
                )
        self.record = record
        return out, record is None  # True discards: nothing to remember

    def snapshot(self) -> UserRecord | None:
        return self.record


def select_song_deltas(items: list[tuple[str, Decision]]) -> list[tuple[str, SongDelta]]:
    """``flat_map_batch`` mapper: the song changes, keyed by song partition."""
    return [d for _, d in items if d.__class__ is tuple]


def select_conflicts(items: list[tuple[str, Decision]]) -> list[tuple[str, DeadLetter]]:
    """``flat_map_batch`` mapper: the conflicts, for the dead-letter output."""
    return [(d.partition, d) for _, d in items if d.__class__ is DeadLetter]
