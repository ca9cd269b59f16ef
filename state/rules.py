"""The counting rules: how one event changes one user's record.

This module is docs/semantics/listeners.md sections 3 and 6 and nothing else. It is pure (no I/O,
no Bytewax), so the user stage, the tests and any future replay tool share one
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

Section 6 adds the record's ``last_active`` and the ``TIMEOUT`` event. A record can
now change without its contribution changing: a ``HEARTBEAT`` on the counted
playback moves ``last_active`` forward (verdict ``heartbeat``), and the user stage
must store that record but tell the counters nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from rankflow.state.events import HEARTBEAT, START, STOP, TIMEOUT


UserRecord = tuple[int, str, str, int, bool]
"""The latest accepted playback of a user, kept forever (it is small):
``(version, playback_id, song_id, last_active, playing)``. A plain tuple: built by one
bytecode, and pickled or serialized without a call back into Python per record (a
named tuple costs both, and there is one record per user).

``last_active`` (section 6) is the greatest ``ts`` of the ``START`` that began the
playback and of every ``HEARTBEAT`` accepted on it while it played; a record made by a
``STOP`` (rule 5, never counted) holds that ``STOP``'s ``ts``, which no rule reads.
It sits before ``playing`` on purpose: records are stored as they are held
(``operators.user_stage``, :func:`from_stored`), and every earlier stored form has the
boolean ``playing`` at index 3, so the type found there tells the two forms apart in
state stored before snapshots carried their format (:func:`from_legacy`)."""

# The fields of a UserRecord, Final so that the type checker knows each field's type.
VERSION: Final = 0
PLAYBACK_ID: Final = 1
SONG_ID: Final = 2
LAST_ACTIVE: Final = 3
PLAYING: Final = 4

UNKNOWN_ACTIVITY = 0
"""``last_active`` of a record stored before records kept it (:func:`from_legacy`)."""


def from_stored(stored: Sequence[Any]) -> tuple[UserRecord, int]:
    """A record as this code stores it (a changelog holds it as a list), and the salt stored
    with it: this module's record, with the salt as a sixth field when it is not 0.

    >>> from_stored([3, "pb3", "s", 1_500, True])
    ((3, 'pb3', 's', 1500, True), 0)
    >>> from_stored((3, "pb3", "s", 1_500, False, 2))
    ((3, 'pb3', 's', 1500, False), 2)
    """
    return (stored[0], stored[1], stored[2], stored[3], stored[4]), stored[5] if len(stored) > 5 else 0


def from_legacy(stored: Sequence[Any]) -> tuple[UserRecord, int]:
    """Legacy: a record as recovery state stored it before its snapshots carried their format
    (``operators.keyed_shards.FORMAT``), and the salt stored with it (0: none). Read only for
    such state; the one place that tells a record's form by its shape.

    Stored forms: :func:`from_stored`'s; and, from before section 6, ``(version,
    playback_id, song_id, playing)`` with the salt as a fifth field (always, in older
    state), older still with a sixth (the routing version, no longer used). A record from
    before section 6 has no ``last_active``: it resumes with :data:`UNKNOWN_ACTIVITY` (0),
    "no activity known", so a ``TIMEOUT`` of its playback is judged by the heartbeats after
    the resume alone (the first one sets ``last_active``). The alternative, a record that
    no ``TIMEOUT`` removes until it heartbeats again, would keep exactly the listeners that
    disconnected before the upgrade counted forever.

    >>> from_legacy([3, "pb3", "s", 1_500, True])
    ((3, 'pb3', 's', 1500, True), 0)
    >>> from_legacy((3, "pb3", "s", True, 2, 4))  # before section 6: salt 2, routing version 4
    ((3, 'pb3', 's', 0, True), 2)
    """
    if type(stored[3]) is bool:
        salt = stored[4] if len(stored) > 4 else 0
        return (stored[0], stored[1], stored[2], UNKNOWN_ACTIVITY, stored[3]), salt
    return from_stored(stored)


class Verdict:
    """What an event did: one of these strings. Conflicts are invalid (dead-lettered).

    Plain interned strings rather than an Enum: the user stage tallies one per event,
    and an Enum member's hash is computed in Python on every dict access.
    """

    STARTED = "started"  # newer playback started, user was not counted
    SWITCHED = "switched"  # newer playback started, user moved songs
    STOPPED = "stopped"  # the counted playback stopped
    CLOSED_NEWER = "closed_newer"  # STOP of a newer playback: older one removed, new one closed
    HEARTBEAT = "heartbeat"  # activity on the counted playback (last_active moves forward, if it is later)
    REPEATED = "repeated"  # same playback, nothing to change (redelivery, closed playback)
    SUPERSEDED = "superseded"  # older version: an old device or a late retry
    UNKNOWN_HEARTBEAT = "unknown_heartbeat"  # heartbeat of a playback never accepted
    TIMED_OUT = "timed_out"  # section 6: the counted playback was idle for idle_ms, removed like a STOP
    STALE_TIMEOUT = "stale_timeout"  # section 6: a timer of a playback that is not the counted one (any more)
    EARLY_TIMEOUT = "early_timeout"  # section 6: the counted playback was active within idle_ms of the timer
    CONFLICT_SONG = "conflict_song"
    CONFLICT_VERSION = "conflict_version"
    VERSION_REUSED = "version_reused"

    ALL = (STARTED, SWITCHED, STOPPED, CLOSED_NEWER, HEARTBEAT, REPEATED, SUPERSEDED, UNKNOWN_HEARTBEAT,
           TIMED_OUT, STALE_TIMEOUT, EARLY_TIMEOUT, CONFLICT_SONG, CONFLICT_VERSION, VERSION_REUSED)
    CONFLICTS = frozenset((CONFLICT_SONG, CONFLICT_VERSION, VERSION_REUSED))


CONFLICT_DETAILS = {
    Verdict.CONFLICT_SONG: "same playback_id as the user's latest playback, different song_id",
    Verdict.CONFLICT_VERSION: "same playback_id as the user's latest playback, different version",
    Verdict.VERSION_REUSED: "version already used by another playback of this user",
}

Change = tuple[str, int, int]


def apply_event(record: UserRecord | None, playback_id: str, song_id: str, version: int,
                etype: str, ts: int, idle_ms: int = 0) -> tuple[UserRecord | None, str]:
    """The record after one event (in arrival order per user), and what the event did.

    The record is returned unchanged (the same object) unless the event changed it.
    A change that is not the counters' concern (a heartbeat's ``last_active``) is a
    new record all the same: whoever stores records must store it. ``idle_ms`` is a
    ``TIMEOUT``'s (:func:`apply_timeout`), unused by the other types.

    >>> apply_event(None, "pb1", "s", 1, START, 1_000)
    ((1, 'pb1', 's', 1000, True), 'started')
    >>> apply_event((1, "pb1", "s", 1_000, True), "pb1", "s", 1, HEARTBEAT, 16_000)
    ((1, 'pb1', 's', 16000, True), 'heartbeat')
    >>> apply_event((1, "pb1", "s", 16_000, True), "pb1", "s", 1, STOP, 20_000)
    ((1, 'pb1', 's', 16000, False), 'stopped')
    """
    if etype == TIMEOUT:  # section 6: its own rule, never a conflict
        return apply_timeout(record, playback_id, song_id, version, ts, idle_ms)
    if record is not None:
        u_version, u_playback, u_song, u_last, u_playing = record
        if playback_id == u_playback:  # 3.1 same playback
            if song_id != u_song:
                return record, Verdict.CONFLICT_SONG
            if version != u_version:
                return record, Verdict.CONFLICT_VERSION
            if u_playing and etype == STOP:
                return (version, playback_id, song_id, u_last, False), Verdict.STOPPED
            if u_playing and etype == HEARTBEAT:  # section 6: activity; a late one changes nothing
                if ts > u_last:
                    return (version, playback_id, song_id, ts, True), Verdict.HEARTBEAT
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
        return (version, playback_id, song_id, ts, starts), Verdict.SWITCHED if starts else Verdict.CLOSED_NEWER
    return (version, playback_id, song_id, ts, starts), Verdict.STARTED if starts else Verdict.CLOSED_NEWER


def apply_timeout(record: UserRecord | None, playback_id: str, song_id: str, version: int, ts: int,
                  idle_ms: int) -> tuple[UserRecord | None, str]:
    """Section 6's rule: a ``TIMEOUT`` removes the counted playback it names if that
    playback has been idle for ``idle_ms`` at the timer's ``ts``; otherwise it changes nothing.

    It removes the contribution only if the record is the playback the timer names
    (same ``playback_id`` and ``version``: the conditions section 6 lists), still
    ``playing``, and ``last_active + idle_ms <= ts``; the listener leaves the song the
    record counts on (one playback has one song, so a sweeper's timer names that song;
    the timer's own ``song_id`` is not read, so a record and its count never disagree).
    Everything else is a timer that lost a race, and the flow cannot tell a race from a
    mistake: a timer of an older, closed or unknown playback (``stale_timeout``), or one
    the playback outlived by a heartbeat, or that fired early (``early_timeout``). So a
    ``TIMEOUT`` valid by shape is never a conflict and never a dead letter, not even
    when its ``version`` differs from the record of the same ``playback_id`` (which
    section 3.1 calls a conflict for the players' events). A ``TIMEOUT`` never creates
    a record either.

    >>> playing = (4, "pb4", "s", 10_000, True)
    >>> apply_timeout(playing, "pb4", "s", 4, 55_000, 45_000)
    ((4, 'pb4', 's', 10000, False), 'timed_out')
    >>> apply_timeout(playing, "pb4", "s", 4, 54_999, 45_000)[1], apply_timeout(playing, "pb3", "s", 3, 99_000, 1)[1]
    ('early_timeout', 'stale_timeout')
    """
    if record is None or playback_id != record[PLAYBACK_ID] or version != record[VERSION] or not record[PLAYING]:
        return record, Verdict.STALE_TIMEOUT
    last = record[LAST_ACTIVE]
    if last + idle_ms > ts:
        return record, Verdict.EARLY_TIMEOUT
    return (version, playback_id, record[SONG_ID], last, False), Verdict.TIMED_OUT


def contribution(record: UserRecord | None) -> str | None:
    """The song the user counts on, if any: each user counts once, on a playing record's song.

    >>> contribution((3, "pb3", "s", 0, True)), contribution((3, "pb3", "s", 0, False))
    ('s', None)
    """
    return record[SONG_ID] if record is not None and record[PLAYING] else None


def changes(old: UserRecord | None, new: UserRecord | None) -> tuple[Change, ...]:
    """What the counters see when a user's record goes from ``old`` to ``new``: nothing
    when the user counts on the same playback before and after (a heartbeat).

    >>> changes((1, "pb1", "a", 0, True), (2, "pb2", "b", 5, True))
    (('a', -1, 0), ('b', 1, 0))
    >>> changes((1, "pb1", "a", 0, True), (1, "pb1", "a", 0, False))
    (('a', -1, -1),)
    >>> changes((1, "pb1", "a", 0, True), (1, "pb1", "a", 9, True))
    ()
    """
    if new is old or (old is not None and new is not None and old[VERSION] == new[VERSION]
                      and old[PLAYING] == new[PLAYING]):
        return ()
    leaves, joins = contribution(old), contribution(new)
    out: list[Change] = []
    if leaves is not None:
        out.append((leaves, -1, 0 if joins is not None else -1))
    if joins is not None:
        out.append((joins, 1, 0 if leaves is not None else 1))
    return tuple(out)
