"""The counting rules: how one event changes one user's record.

This module is SEMANTICS.md section 3 and nothing else. It is pure (no I/O, no
Bytewax), so the user stage, the tests and any future replay tool share one
definition of "what an event means".

A user's whole history is folded into one small :data:`UserRecord`, and
:func:`apply_event` gives the record after one event. What the counters see
follows from the records alone: a user counts once, on the song of a record that
is ``playing`` (:func:`contribution`), so when the record changes the user's
contribution leaves the old song and joins the new one (:func:`changes`). Each
change is ``(song_id, delta, user_delta)``: ``delta`` is the song's listener change
and ``user_delta`` the change in the number of users counted as playing. The two
sums are computed independently downstream; their equality is the invariant every
snapshot is checked against.
"""

from __future__ import annotations

from rankflow.state.events import HEARTBEAT, START, STOP


UserRecord = tuple[int, str, str, bool]
"""The latest accepted playback of a user, kept forever (it is small):
``(version, playback_id, song_id, playing)``. A plain tuple: built by one bytecode,
and pickled or serialized without a call back into Python per record (a named
tuple costs both, and there is one record per user)."""

VERSION, PLAYBACK_ID, SONG_ID, PLAYING = range(4)


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

Change = tuple[str, int, int]


def apply_event(record: UserRecord | None, playback_id: str, song_id: str, version: int,
                etype: str) -> tuple[UserRecord | None, str]:
    """The record after one event (in arrival order per user), and what the event did.

    The record is returned unchanged (the same object) unless the event changed it.

    >>> apply_event(None, "pb1", "s", 1, START)
    ((1, 'pb1', 's', True), 'started')
    >>> apply_event((1, "pb1", "s", True), "pb1", "s", 1, STOP)
    ((1, 'pb1', 's', False), 'stopped')
    """
    if record is not None:
        u_version, u_playback, u_song, u_playing = record
        if playback_id == u_playback:  # 3.1 same playback
            if song_id != u_song:
                return record, Verdict.CONFLICT_SONG
            if version != u_version:
                return record, Verdict.CONFLICT_VERSION
            if u_playing and etype == STOP:
                return (version, playback_id, song_id, False), Verdict.STOPPED
            if u_playing and etype == HEARTBEAT:
                return record, Verdict.HEARTBEAT
            return record, Verdict.REPEATED
        if version == u_version:  # 3.2 version reused
            return record, Verdict.VERSION_REUSED
        if version < u_version:  # 3.3 superseded
            return record, Verdict.SUPERSEDED
    if etype == HEARTBEAT:  # 3.4 heartbeat of an unknown newer playback
        return record, Verdict.UNKNOWN_HEARTBEAT
    starts = etype == START  # 3.5 newer playback; a STOP is remembered so its late START counts nothing
    if record is not None and record[PLAYING]:
        return (version, playback_id, song_id, starts), Verdict.SWITCHED if starts else Verdict.CLOSED_NEWER
    return (version, playback_id, song_id, starts), Verdict.STARTED if starts else Verdict.CLOSED_NEWER


def contribution(record: UserRecord | None) -> str | None:
    """The song the user counts on, if any: each user counts once, on a playing record's song.

    >>> contribution((3, "pb3", "s", True)), contribution((3, "pb3", "s", False))
    ('s', None)
    """
    return record[SONG_ID] if record is not None and record[PLAYING] else None


def changes(old: UserRecord | None, new: UserRecord | None) -> tuple[Change, ...]:
    """What the counters see when a user's record goes from ``old`` to ``new``.

    >>> changes((1, "pb1", "a", True), (2, "pb2", "b", True))
    (('a', -1, 0), ('b', 1, 0))
    >>> changes((1, "pb1", "a", True), (1, "pb1", "a", False))
    (('a', -1, -1),)
    """
    if new is old:
        return ()
    leaves, joins = contribution(old), contribution(new)
    out: list[Change] = []
    if leaves is not None:
        out.append((leaves, -1, 0 if joins is not None else -1))
    if joins is not None:
        out.append((joins, 1, 0 if leaves is not None else 1))
    return tuple(out)
