"""The counting rules alone (state.rules), one docs/semantics/listeners.md clause at a time."""

from __future__ import annotations

import pytest

from rankflow.state.rules import Verdict, changes, from_legacy, from_stored


def UserRecord(version, playback_id, song_id, playing, last_active=0):  # noqa: N802 - reads like the record it builds
    return (version, playback_id, song_id, last_active, playing)


def apply_event(record, playback_id, song_id, version, etype, ts=0, idle_ms=0):
    """The rules and what the counters see, together: (new record, changes, verdict)."""
    from rankflow.state.rules import apply_event as apply

    new, verdict = apply(record, playback_id, song_id, version, etype, ts, idle_ms)
    return new, changes(record, new), verdict

PLAYING = UserRecord(42, "pb42", "song_101", True)
CLOSED = UserRecord(42, "pb42", "song_101", False)


def test_first_start_counts_the_user():
    rec, changes, verdict = apply_event(None, "pb1", "s", 1, "START")
    assert rec == UserRecord(1, "pb1", "s", True)
    assert changes == (("s", 1, 1),) and verdict == Verdict.STARTED


def test_newer_start_switches_songs_without_changing_user_count():
    rec, changes, verdict = apply_event(PLAYING, "pb43", "song_202", 43, "START")
    assert rec == UserRecord(43, "pb43", "song_202", True)
    assert changes == (("song_101", -1, 0), ("song_202", 1, 0)) and verdict == Verdict.SWITCHED


def test_stop_of_counted_playback():
    rec, changes, _ = apply_event(PLAYING, "pb42", "song_101", 42, "STOP")
    assert rec == CLOSED and changes == (("song_101", -1, -1),)


def test_repeats_and_closed_playbacks_change_nothing():
    for record, etype in [(PLAYING, "START"), (CLOSED, "STOP"), (CLOSED, "START"), (CLOSED, "HEARTBEAT")]:
        rec, changes, verdict = apply_event(record, "pb42", "song_101", 42, etype)
        assert (rec, changes, verdict) == (record, (), Verdict.REPEATED)


def test_heartbeat_of_counted_playback():
    assert apply_event(PLAYING, "pb42", "song_101", 42, "HEARTBEAT") == (PLAYING, (), Verdict.HEARTBEAT)
    rec, changes, verdict = apply_event(PLAYING, "pb42", "song_101", 42, "HEARTBEAT", 15_000)
    assert rec == UserRecord(42, "pb42", "song_101", True, last_active=15_000), "3.1: it refreshes the activity time"
    assert changes == () and verdict == Verdict.HEARTBEAT, "... and nothing else"


def test_conflicts():
    assert apply_event(PLAYING, "pb42", "song_999", 42, "STOP")[2] == Verdict.CONFLICT_SONG
    assert apply_event(PLAYING, "pb42", "song_101", 41, "STOP")[2] == Verdict.CONFLICT_VERSION
    assert apply_event(PLAYING, "pb_other", "song_101", 42, "START")[2] == Verdict.VERSION_REUSED
    assert Verdict.CONFLICTS == {Verdict.CONFLICT_SONG, Verdict.CONFLICT_VERSION, Verdict.VERSION_REUSED}


def test_superseded_older_version():
    assert apply_event(PLAYING, "pb41", "song_7", 41, "START") == (PLAYING, (), Verdict.SUPERSEDED)


def test_heartbeat_of_unknown_newer_playback():
    assert apply_event(PLAYING, "pb50", "song_7", 50, "HEARTBEAT") == (PLAYING, (), Verdict.UNKNOWN_HEARTBEAT)
    assert apply_event(None, "pb50", "song_7", 50, "HEARTBEAT") == (None, (), Verdict.UNKNOWN_HEARTBEAT)


def test_newer_stop_closes_older_contribution_and_remembers_itself():
    rec, changes, verdict = apply_event(PLAYING, "pb43", "song_202", 43, "STOP")
    assert rec == UserRecord(43, "pb43", "song_202", False)
    assert changes == (("song_101", -1, -1),) and verdict == Verdict.CLOSED_NEWER
    # ... so its late START finds it closed.
    assert apply_event(rec, "pb43", "song_202", 43, "START") == (rec, (), Verdict.REPEATED)


def test_stop_before_start_for_a_new_user():
    rec, changes, _ = apply_event(None, "pb1", "s", 1, "STOP")
    assert rec == UserRecord(1, "pb1", "s", False) and changes == ()


# docs/semantics/listeners.md 6: last_active and TIMEOUT. A player starts at 10 s and heartbeats every 15 s;
# the sweeper's idle timeout T is 45 s.
T = 45_000


def started(ts: int = 10_000) -> tuple:
    return apply_event(None, "pb1", "s", 1, "START", ts)[0]


def timeout(record, ts, playback_id="pb1", song_id="s", version=1, idle_ms=T):
    return apply_event(record, playback_id, song_id, version, "TIMEOUT", ts, idle_ms)


def test_last_active_is_the_start_then_the_greatest_heartbeat():
    rec = started()
    assert rec == UserRecord(1, "pb1", "s", True, last_active=10_000)
    for ts, expected in [(25_000, 25_000), (40_000, 40_000), (30_000, 40_000)]:  # a late heartbeat: max
        new, changes, verdict = apply_event(rec, "pb1", "s", 1, "HEARTBEAT", ts)
        assert new[3] == expected and changes == () and verdict == Verdict.HEARTBEAT
        assert (new is rec) == (ts <= rec[3]), "the same record when nothing changed"
        rec = new


def test_a_timer_fires_on_an_idle_playback():
    """No activity for T: the playback leaves like a STOP, at the deadline exactly or later."""
    rec = apply_event(started(), "pb1", "s", 1, "HEARTBEAT", 25_000)[0]
    for ts in (25_000 + T, 25_000 + T + 1, 10**13):
        new, changes, verdict = timeout(rec, ts)
        assert new == UserRecord(1, "pb1", "s", False, last_active=25_000)
        assert changes == (("s", -1, -1),) and verdict == Verdict.TIMED_OUT


def test_a_premature_timer_changes_nothing():
    rec = started()
    assert timeout(rec, 10_000 + T - 1) == (rec, (), Verdict.EARLY_TIMEOUT)
    assert timeout(rec, 0) == (rec, (), Verdict.EARLY_TIMEOUT), "a timer older than the playback"


def test_a_heartbeat_after_the_timer_was_set_wins():
    """The sweeper set the deadline 55 s from the START; a heartbeat at 50 s arrives before
    the timer it fired at 55 s: the playback was active 5 s before, so it stays."""
    rec = apply_event(started(), "pb1", "s", 1, "HEARTBEAT", 50_000)[0]
    assert timeout(rec, 55_000) == (rec, (), Verdict.EARLY_TIMEOUT)
    assert timeout(rec, 95_000)[2] == Verdict.TIMED_OUT, "... until it is idle for T after the heartbeat"


def test_a_stale_timer_of_an_older_playback_changes_nothing():
    """The player switched to pb2 before pb1's timer arrived: the old timer never removes the newer playback."""
    rec = apply_event(started(), "pb2", "t", 2, "START", 20_000)[0]
    assert timeout(rec, 10**13) == (rec, (), Verdict.STALE_TIMEOUT)


@pytest.mark.parametrize("record", [None, UserRecord(1, "pb1", "s", False, last_active=10_000),
                                    UserRecord(3, "pb3", "s", True)], ids=["no user", "closed", "newer playback"])
def test_timers_of_playbacks_not_counted_change_nothing(record):
    assert timeout(record, 10**13) == (record, (), Verdict.STALE_TIMEOUT)


def test_a_timer_of_an_unknown_newer_playback_creates_nothing():
    """Unlike a STOP (rule 5), a TIMEOUT never makes a record: it only removes one."""
    rec = started()
    assert timeout(rec, 10**13, "pb9", "x", 9) == (rec, (), Verdict.STALE_TIMEOUT)
    assert timeout(None, 10**13, "pb9", "x", 9) == (None, (), Verdict.STALE_TIMEOUT)


def test_a_timer_that_does_not_match_its_playback_is_never_a_conflict():
    """Same playback_id, another version (3.1 would call a player's event a conflict), or a
    version reused by another playback (3.2): the timer names a playback this record is
    not, so it changes nothing and is no dead letter (state.rules.apply_timeout)."""
    rec = started()
    for playback, song, version in [("pb1", "s", 0), ("pb1", "other", 2), ("pb_other", "s", 1)]:
        new, changes, verdict = timeout(rec, 10**13, playback, song, version)
        assert (new, changes, verdict) == (rec, (), Verdict.STALE_TIMEOUT)
        assert verdict not in Verdict.CONFLICTS


def test_after_a_timeout_the_playback_is_closed():
    """A late HEARTBEAT or a repeated START of the timed-out playback changes nothing (3.1);
    a second firing of the timer neither; a new playback counts again."""
    rec = timeout(started(), 10**6)[0]
    assert apply_event(rec, "pb1", "s", 1, "HEARTBEAT", 10**6 + 1) == (rec, (), Verdict.REPEATED)
    assert apply_event(rec, "pb1", "s", 1, "START", 10**6 + 2) == (rec, (), Verdict.REPEATED)
    assert timeout(rec, 10**6 + 3) == (rec, (), Verdict.STALE_TIMEOUT)
    new, changes, verdict = apply_event(rec, "pb2", "s", 2, "START", 10**6 + 4)
    assert changes == (("s", 1, 1),) and verdict == Verdict.STARTED


def test_the_timeout_uses_the_timers_own_idle_ms():
    """Each TIMEOUT carries the T it was fired with; a shorter one removes a playback sooner."""
    rec = started()
    assert timeout(rec, 10_001, idle_ms=1)[2] == Verdict.TIMED_OUT
    assert timeout(rec, 10**13, idle_ms=10**13)[2] == Verdict.EARLY_TIMEOUT
    assert timeout(rec, 2**70, idle_ms=2**69)[2] == Verdict.TIMED_OUT, "integers of any size"


def test_a_record_stored_before_last_active_loads_with_no_activity_known():
    assert from_legacy([1, "pb1", "s", True]) == (UserRecord(1, "pb1", "s", True), 0)
    assert from_legacy([1, "pb1", "s", True, 3]) == (UserRecord(1, "pb1", "s", True), 3)
    assert from_legacy((1, "pb1", "s", False, 0, 4)) == (UserRecord(1, "pb1", "s", False), 0)
    assert from_legacy([1, "pb1", "s", 0, True]) == (UserRecord(1, "pb1", "s", True), 0), "last_active 0 is an int"
    assert from_legacy([1, "pb1", "s", 7, False, 2]) == (UserRecord(1, "pb1", "s", False, last_active=7), 2)


def test_a_record_stored_now_is_read_by_its_format_alone():
    """State that carries its format holds this module's records: read as they are, never sniffed."""
    assert from_stored([1, "pb1", "s", 0, True]) == (UserRecord(1, "pb1", "s", True), 0)
    assert from_stored((1, "pb1", "s", 7, False, 2)) == (UserRecord(1, "pb1", "s", False, last_active=7), 2)


def test_a_timer_naming_another_song_removes_the_playback_from_its_own_song():
    """Section 6 lists playback_id and version: a timer of the counted playback whose song_id
    differs still removes it, from the song the record counts on (never a negative count)."""
    rec = started()
    new, changes, verdict = timeout(rec, 10**13, "pb1", "other", 1)
    assert verdict == Verdict.TIMED_OUT and changes == (("s", -1, -1),)
