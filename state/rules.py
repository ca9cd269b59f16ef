"""The counting rules: how one event changes one user's contribution.

This module is SEMANTICS.md section 3 and nothing else. It is pure (no I/O, no
Bytewax), so the user stage, the tests and any future replay tool share one
definition of "what an event means".

A user's whole history is folded into one small :class:`UserRecord`. The rules
return the new record and the song changes to send to the counters. Each change is
``(song_id, delta, user_delta)``: ``delta`` is the song's listener change and
``user_delta`` the change in the number of users counted as playing. The two sums
are computed independently downstream; their equality is the invariant every
snapshot is checked against.
"""

from __future__ import annotations

from typing import NamedTuple

from rankflow.state.events import START, STOP, HEARTBEAT


class UserRecord(NamedTuple):
    """The latest accepted playback of a user (kept forever: it is small)."""

    version: int
    playback_id: str
    song_id: str
    playing: bool


class Verdict:
    """What an event did: one of these strings. Conflicts are invalid (dead-lettered).

    Plain interned strings rather than an Enum: the user stage tallies one per event,
    and an Enum member's hash is computed in Python on every dict access.
    """

    STARTED = "started"  # newer playback started, user was not counted
    SWITCHED = "switched"  # newer playback started, user moved songs
    STOPPED = "stopped"  # the counted playback stopped
    CLOSED_NEWER = "closed_newer"  # STOP of a newer playback: older one removed, new one closed
    HEARTBEAT = "heartbeat"  # activity on the counted playback
    REPEATED = "repeated"  # same playback, nothing to change (redelivery, closed playback)
    SUPERSEDED = "superseded"  # older version: an old device or a late retry
    UNKNOWN_HEARTBEAT = "unknown_heartbeat"  # heartbeat of a playback never accepted
    CONFLICT_SONG = "conflict_song"
    CONFLICT_VERSION = "conflict_version"
    VERSION_REUSED = "version_reused"

    ALL = (STARTED, SWITCHED, STOPPED, CLOSED_NEWER, HEARTBEAT, REPEATED, SUPERSEDED, UNKNOWN_HEARTBEAT,
           CONFLICT_SONG, CONFLICT_VERSION, VERSION_REUSED)
    CONFLICTS = frozenset((CONFLICT_SONG, CONFLICT_VERSION, VERSION_REUSED))


CONFLICT_DETAILS = {
    Verdict.CONFLICT_SONG: "same playback_id as the user's latest playback, different song_id",
    Verdict.CONFLICT_VERSION: "same playback_id as the user's latest playback, different version",
    Verdict.VERSION_REUSED: "version already used by another playback of this user",
}

_record = tuple.__new__  # builds a UserRecord without NamedTuple's Python-level __new__

Change = tuple[str, int, int]
NO_CHANGES: tuple[Change, ...] = ()


def apply_event(
    record: UserRecord | None, playback_id: str, song_id: str, version: int, etype: str
) -> tuple[UserRecord | None, tuple[Change, ...], str]:
    """Apply one event to a user's record, in arrival order (SEMANTICS.md 3.1-3.5)."""
    if record is not None:
        if playback_id == record.playback_id:
            return _same_playback(record, song_id, version, etype)
        if version == record.version:
            return record, NO_CHANGES, Verdict.VERSION_REUSED
        if version < record.version:
            return record, NO_CHANGES, Verdict.SUPERSEDED
    if etype == HEARTBEAT:
        return record, NO_CHANGES, Verdict.UNKNOWN_HEARTBEAT
    return _newer_playback(record, playback_id, song_id, version, etype == START)


def _same_playback(
    record: UserRecord, song_id: str, version: int, etype: str
) -> tuple[UserRecord, tuple[Change, ...], str]:
    if song_id != record.song_id:
        return record, NO_CHANGES, Verdict.CONFLICT_SONG
    if version != record.version:
        return record, NO_CHANGES, Verdict.CONFLICT_VERSION
    if record.playing and etype == STOP:
        return _record(UserRecord, (version, record.playback_id, song_id, False)), ((song_id, -1, -1),), Verdict.STOPPED
    if record.playing and etype == HEARTBEAT:
        return record, NO_CHANGES, Verdict.HEARTBEAT
    return record, NO_CHANGES, Verdict.REPEATED


def _newer_playback(
    record: UserRecord | None, playback_id: str, song_id: str, version: int, starts: bool
) -> tuple[UserRecord, tuple[Change, ...], str]:
    was_playing = record is not None and record.playing
    new_record = _record(UserRecord, (version, playback_id, song_id, starts))
    if starts and was_playing:
        assert record is not None
        return new_record, ((record.song_id, -1, 0), (song_id, 1, 0)), Verdict.SWITCHED
    if starts:
        return new_record, ((song_id, 1, 1),), Verdict.STARTED
    if was_playing:
        assert record is not None
        return new_record, ((record.song_id, -1, -1),), Verdict.CLOSED_NEWER
    return new_record, NO_CHANGES, Verdict.CLOSED_NEWER

