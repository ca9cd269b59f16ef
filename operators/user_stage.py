"""The user stage: one contribution per user (``stateful_batch`` keyed by ``user_id``).

Contract:

* **Input**: ``(user_id, PlaybackEvent)``, in arrival order per user (one user's
  events come from one source partition along one path).
* **State**: :class:`UserState`: the user's :class:`state.rules.UserRecord` and the
  salt of the partial counter holding the current contribution (0: the song's
  ordinary counter; see ``operators.routing``), with the number of salts in use when
  it was chosen (the routing version). A user whose events never created a record
  (only heartbeats) is discarded at once; records are otherwise kept forever, as
  SEMANTICS.md section 2 requires. The snapshot is the immutable state itself, so
  snapshots stay cheap at millions of keys.
* **Output**, still keyed by ``user_id``: a list of the
  :data:`operators.routing.SongDelta` the rules accepted in the batch (one item, since
  the runtime's cost is per item), and a ``DeadLetter`` for every conflict.
  Every output carries the epoch of the event that caused it, so the song counters
  know which barrier a change belongs to. A -1 always leaves the contribution the
  record holds, so it carries the recorded salt; a +1 the salt chosen now.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from bytewax.operators import StatefulBatchLogic

from operators.metrics import METRICS
from operators.routing import HOT_SONGS, HotSongs, SongDelta, user_salt
from state.events import DeadLetter, PlaybackEvent
from state.rules import CONFLICT_DETAILS, UserRecord, Verdict, apply_event

Decision = list[SongDelta] | DeadLetter


class UserState(NamedTuple):
    record: UserRecord
    salt: int  # partial counter of the current contribution; 0 = the ordinary one
    salts: int  # how many salts the routing used when it chose ``salt`` (0 when not split)


VERDICTS: dict[str, int] = dict.fromkeys(Verdict.ALL, 0)
"""Per-process tally of what events did (duplicates, superseded, ...), for metrics."""
METRICS.verdicts = VERDICTS

_state = tuple.__new__  # builds a UserState without NamedTuple's Python-level __new__


class UserLogic(StatefulBatchLogic[PlaybackEvent, Decision, UserState | None]):
    __slots__ = ("state", "hot", "tally")

    def __init__(self, state: UserState | None, hot: HotSongs) -> None:
        self.state = state
        self.hot = hot
        self.tally = VERDICTS

    @classmethod
    def builder(cls, hot: HotSongs = HOT_SONGS) -> Callable[[UserState | None], "UserLogic"]:
        return lambda resume: cls(resume, hot)

    def on_batch(self, events: list[PlaybackEvent]) -> tuple[list[Decision], bool]:
        out: list[Decision] = []
        deltas: list[SongDelta] = []
        state, tally, hot = self.state, self.tally, self.hot
        for ev in events:
            record = state.record if state is not None else None
            new_record, changes, verdict = apply_event(record, ev.playback_id, ev.song_id, ev.version, ev.type)
            tally[verdict] += 1
            if changes:
                old_salt = state.salt if state is not None else 0
                salt = salts = 0
                if new_record is not record and new_record.playing and ev.song_id in hot.hot:
                    salts = hot.salts
                    salt = user_salt(ev.user_id, salts)
                for song, delta, user_delta in changes:
                    deltas.append((ev.epoch, song, old_salt if delta < 0 else salt, delta, user_delta))
                state = _state(UserState, (new_record, salt, salts))
            elif new_record is not record:
                state = _state(UserState, (new_record, 0, 0))  # a STOP of a newer playback: nothing counted
            elif verdict in Verdict.CONFLICTS:
                out.append(DeadLetter(verdict, CONFLICT_DETAILS[verdict], ev.partition, ev.offset, ev.raw, ev.epoch))
        self.state = state
        if deltas:
            out.append(deltas)  # one item for all of the batch's changes: fewer items for the runtime
        return out, state is None  # True discards: nothing to remember

    def snapshot(self) -> UserState | None:
        return self.state


def select_conflicts(items: list[tuple[str, Decision]]) -> list[tuple[str, DeadLetter]]:
    """``flat_map_batch`` mapper: the conflicts, for the dead-letter output."""
    conflicts = [(d.partition, d) for _, d in items if d.__class__ is DeadLetter]
    for _, d in conflicts:
        METRICS.dead_letters[d.reason] += 1
    return conflicts
