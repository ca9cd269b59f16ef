"""The counting rules alone (state.rules), one SEMANTICS.md clause at a time."""

from __future__ import annotations

from rankflow.state.rules import Verdict, changes


def UserRecord(version, playback_id, song_id, playing):  # noqa: N802 - reads like the record it builds
    return (version, playback_id, song_id, playing)


def apply_event(record, playback_id, song_id, version, etype):
    """The rules and what the counters see, together: (new record, changes, verdict)."""
    from rankflow.state.rules import apply_event as apply

    new, verdict = apply(record, playback_id, song_id, version, etype)
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
