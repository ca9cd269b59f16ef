"""Every story of the seed design, through the real flow and a real Redis."""

from __future__ import annotations

import orjson

from tests.events import ev, ranking


def background(n_101: int = 3, n_202: int = 2) -> list[bytes]:
    """Other listeners, so that songs have counts before the story starts."""
    lines = [ev(f"bg_{i}", f"bg_pb_{i}", "song_101", "START", 1) for i in range(n_101)]
    lines += [ev(f"bg2_{i}", f"bg2_pb_{i}", "song_202", "START", 1) for i in range(n_202)]
    return lines


def test_user_36_switch_moves_one_listener(flow):
    lines = background() + [
        ev("user_36", "playback_901", "song_101", "START", 42),
        ev("user_36", "playback_902", "song_202", "START", 43),  # switch: the START arrives first
        ev("user_36", "playback_901", "song_101", "STOP", 42),  # the old STOP, late: no change
    ]
    out = flow.run(flow.write_log(lines))
    assert ranking(out["final"]) == [("song_202", 3), ("song_101", 3)]  # tie: song_id desc
    assert out["final"]["total_listeners"] == out["final"]["counted_users"] == 6


def test_duplicate_start_counts_once(flow):
    lines = [ev("user_36", "playback_901", "song_101", "START", 1)] * 3
    out = flow.run(flow.write_log(lines))
    assert ranking(out["final"]) == [("song_101", 1)]
    assert out["dead_letters"] == []


def test_stop_before_start_counts_nothing(flow):
    lines = background(1, 0) + [
        ev("user_36", "playback_901", "song_202", "STOP", 5),
        ev("user_36", "playback_901", "song_202", "START", 5),
    ]
    out = flow.run(flow.write_log(lines))
    assert ranking(out["final"]) == [("song_101", 1)]


def test_stop_before_start_closes_the_older_contribution(flow):
    lines = [
        ev("user_36", "playback_900", "song_101", "START", 4),
        ev("user_36", "playback_901", "song_202", "STOP", 5),  # newer playback, stopped before it started
        ev("user_36", "playback_901", "song_202", "START", 5),
    ]
    out = flow.run(flow.write_log(lines))
    assert ranking(out["final"]) == []
    assert out["final"]["counted_users"] == 0


def test_repeated_stop_subtracts_once(flow):
    lines = background(2, 0) + [
        ev("user_36", "playback_901", "song_101", "START", 1),
        ev("user_36", "playback_901", "song_101", "STOP", 1),
        ev("user_36", "playback_901", "song_101", "STOP", 1),
    ]
    out = flow.run(flow.write_log(lines))
    assert ranking(out["final"]) == [("song_101", 2)]


def test_old_device_late_start_is_superseded(flow):
    lines = [
        ev("user_36", "playback_43", "song_202", "START", 43),
        ev("user_36", "playback_42", "song_101", "START", 42),  # the old device, late
        ev("user_36", "playback_42", "song_101", "STOP", 42),
    ]
    out = flow.run(flow.write_log(lines))
    assert ranking(out["final"]) == [("song_202", 1)]
    assert out["dead_letters"] == []


def test_ties_rank_by_song_id_descending(flow):
    songs = ["song_9", "song_10", "song_a", "Song_b", "song_é"]
    lines = [ev(f"u{i}", f"p{i}", s, "START", 1) for i, s in enumerate(songs)]
    lines += [ev("x", "px", "song_1", "START", 1), ev("y", "py", "song_1", "START", 1)]
    out = flow.run(flow.write_log(lines))
    # Byte-wise descending, as Redis's ZRANGE ... REV orders equal scores.
    assert ranking(out["final"]) == [("song_1", 2)] + sorted(
        ((s, 1) for s in songs), key=lambda sc: sc[0].encode(), reverse=True)


def test_fewer_songs_than_k(flow):
    lines = [ev("u1", "p1", "song_a", "START", 1), ev("u2", "p2", "song_b", "START", 1)]
    out = flow.run(flow.write_log(lines), k_max=10)
    assert len(out["final"]["items"]) == 2
    assert [i["rank"] for i in out["final"]["items"]] == [1, 2]


def test_song_leaves_ranking_at_zero(flow):
    lines = [
        ev("u1", "p1", "song_a", "START", 1),
        ev("u2", "p2", "song_b", "START", 1),
        ev("u1", "p1", "song_a", "STOP", 1),
    ]
    out = flow.run(flow.write_log(lines))
    assert ranking(out["final"]) == [("song_b", 1)]
    assert out["final"]["active_songs"] == 1


def test_heartbeats_change_nothing(flow):
    lines = [
        ev("u1", "p1", "song_a", "HEARTBEAT", 1),  # unknown playback
        ev("u1", "p1", "song_a", "START", 1),
        ev("u1", "p1", "song_a", "HEARTBEAT", 1),
    ]
    out = flow.run(flow.write_log(lines))
    assert ranking(out["final"]) == [("song_a", 1)]


def test_conflicts_and_bad_shapes_go_to_dead_letters_with_reason_and_position(flow):
    lines = [
        ev("u1", "p1", "song_a", "START", 1),
        ev("u1", "p1", "song_b", "START", 1),  # same playback, other song
        ev("u1", "p1", "song_a", "STOP", 2),  # same playback, other version
        ev("u1", "p2", "song_c", "START", 1),  # version reused
        b"{not json",
        orjson.dumps({"user_id": "u2", "playback_id": "p", "song_id": "s", "type": "PAUSE", "version": 1, "ts": 1}),
        orjson.dumps({"user_id": "u2", "playback_id": "p", "song_id": "s", "type": "START", "version": True, "ts": 1}),
    ]
    path = flow.write_log(lines)
    out = flow.run(path)
    assert ranking(out["final"]) == [("song_a", 1)]
    dead = [orjson.loads(d) for d in out["dead_letters"]]
    assert [(d["reason"], d["position"]["offset"]) for d in dead] == [
        ("conflict_song", 1), ("conflict_version", 2), ("version_reused", 3),
        ("invalid_json", 4), ("unknown_type", 5), ("wrong_type", 6),
    ]
    assert all(d["position"]["partition"] == path for d in dead)
    assert dead[4]["raw"] == lines[5].decode()
    assert out["final"]["dead_letters"] == 6
    assert out["final"]["positions"] == {path: len(lines)}
