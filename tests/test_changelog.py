"""The user shards' changelog: a position restores exactly the records of its barrier."""

from __future__ import annotations

import pytest

from rankflow.connectors import changelog as changelog_module
from rankflow.connectors.changelog import ChangelogCorrupt, ShardChangelog
from rankflow.operators import user_stage
from rankflow.operators.keyed_shards import FORMAT
from rankflow.operators.user_stage import UserShardLogic
from rankflow.state.events import PlaybackEvent


def rec(version: int, song: str = "s", playing: bool = True) -> list:
    return [version, f"p{version}", song, playing]  # records come back as JSON arrays


def everything(records: dict) -> object:
    return lambda: dict(records)


def test_a_position_restores_its_barrier_and_cuts_what_came_after(tmp_path):
    log = ShardChangelog(tmp_path, "users-1")
    assert log.restore(None) == {}
    state: dict = {}
    positions = []
    for epoch, changes in enumerate([{"a": rec(1)}, {"b": rec(1)}, {"a": rec(2, "t")}, {"c": rec(5)}], start=1):
        state.update(changes)
        positions.append((log.append(changes, everything(state), epoch), dict(state)))
    log.close()
    for position, expected in reversed(positions):  # latest first: a restore cuts what follows its position
        again = ShardChangelog(tmp_path, "users-1")
        assert again.restore(position) == expected
        again.close()
    assert (tmp_path / "users-1.g1.log").stat().st_size == positions[0][0][3]
    # Appending goes on from the restored barrier.
    again = ShardChangelog(tmp_path, "users-1")
    assert again.restore(positions[0][0]) == {"a": rec(1)}
    later = again.append({"d": rec(1)}, everything({}), 9)
    again.close()
    assert ShardChangelog(tmp_path, "users-1").restore(later) == {"a": rec(1), "d": rec(1)}


def test_compaction_starts_generations_and_releases_the_old_one_after_a_later_epoch(tmp_path, monkeypatch):
    monkeypatch.setattr(changelog_module, "COMPACT_MIN_BYTES", 0)
    log = ShardChangelog(tmp_path, "users-2")
    log.restore(None)
    state = {f"u{i}": rec(1) for i in range(5)}
    position = log.append(dict(state), everything(state), 1)
    assert position[2] == 1
    epoch = 1
    while position[2] == 1:  # deltas outgrow the image, then a new generation starts with an image
        epoch += 1
        changes = {f"u{epoch}-{i}": rec(epoch) for i in range(20)}
        state.update(changes)
        position = log.append(changes, everything(state), epoch)
    assert position[2] == 2 and position[3] > 0
    assert len(list(tmp_path.iterdir())) == 2, "the replaced generation stays while Bytewax may resume before it"
    log.release(epoch)
    assert len(list(tmp_path.iterdir())) == 2, "not before a later epoch"
    log.release(epoch + 1)
    assert [p.name for p in tmp_path.iterdir()] == ["users-2.g2.log"]
    log.close()
    assert ShardChangelog(tmp_path, "users-2").restore(position) == state


def test_a_restore_removes_generations_the_position_does_not_name(tmp_path, monkeypatch):
    monkeypatch.setattr(changelog_module, "COMPACT_MIN_BYTES", 0)
    log = ShardChangelog(tmp_path, "users-3")
    log.restore(None)
    first = log.append({"a": rec(1)}, everything({"a": rec(1)}), 1)
    big = {f"u{i}": rec(2) for i in range(50)}
    log.append(big, everything({"a": rec(1), **big}), 2)
    log.append({"z": rec(3)}, everything({"a": rec(1), **big, "z": rec(3)}), 3)  # a compaction, never committed
    log.close()
    assert len(list(tmp_path.iterdir())) == 2
    assert ShardChangelog(tmp_path, "users-3").restore(first) == {"a": rec(1)}
    assert [p.name for p in tmp_path.iterdir()] == ["users-3.g1.log"]
    ShardChangelog(tmp_path, "users-3").restore(None)
    assert list(tmp_path.iterdir()) == [], "a shard with no committed state starts empty"


def test_a_changelog_that_does_not_match_its_position_is_an_error_not_a_guess(tmp_path):
    log = ShardChangelog(tmp_path, "users-4")
    log.restore(None)
    log.append({"a": rec(1)}, everything({"a": rec(1)}), 1)
    position = log.append({"b": rec(1)}, everything({}), 2)
    log.close()
    path = tmp_path / "users-4.g1.log"
    data = path.read_bytes()
    with pytest.raises(ChangelogCorrupt, match="should hold"):
        ShardChangelog(tmp_path, "users-4").restore(position[:3] + (position[3] + 1,))
    path.write_bytes(data[:-3] + bytes([data[-3] ^ 0xFF]) + data[-2:])
    with pytest.raises(ChangelogCorrupt, match="damaged frame"):
        ShardChangelog(tmp_path, "users-4").restore(position)
    path.unlink()
    with pytest.raises(ChangelogCorrupt, match="missing"):
        ShardChangelog(tmp_path, "users-4").restore(position)


def test_a_shard_resumed_from_a_whole_snapshot_writes_it_to_its_changelog(tmp_path):
    """Recovery state from before changelogs held whole shards: it still resumes."""
    older = {"u1": (3, "p3", "song", True, 0), "u2": (1, "p1", "other", False, 0)}  # whole-shard state had 5 fields
    logic = UserShardLogic.builder(tmp_path, shards=4)(older)
    logic.on_batch([("f", 7, [PlaybackEvent("u1", "p3", "song", "STOP", 3, 0, 0, b"")])])
    position = logic.snapshot()
    restored = UserShardLogic.builder(tmp_path, shards=4)(position)
    assert restored.records == {"u1": (3, "p3", "song", 0, False), "u2": (1, "p1", "other", 0, False)}


def test_a_changelog_written_before_last_active_resumes(tmp_path):
    """Changelogs written before docs/semantics/listeners.md 6 hold ``[version, playback_id, song_id, playing]``
    (a salt as a fifth field): they resume with ``last_active`` 0, "no activity known", so the
    first heartbeat after the resume sets it, and a timer is judged by what came after."""
    log = ShardChangelog(tmp_path, "users-0")
    log.restore(None)
    old = {"idle": [3, "p3", "song", True], "split": [2, "p2", "hit", True, 1], "beats": [5, "p5", "song", True],
           "stopped": [1, "p1", "song", False]}
    position = log.append(old, everything(old), 1)
    log.close()
    logic = UserShardLogic.builder(tmp_path, shards=1)(position)
    assert logic.records == {"idle": (3, "p3", "song", 0, True), "split": (2, "p2", "hit", 0, True),
                             "beats": (5, "p5", "song", 0, True), "stopped": (1, "p1", "song", 0, False)}
    assert logic.salts == {"split": 1}
    timers = [PlaybackEvent("beats", "p5", "song", "HEARTBEAT", 5, 50_000, 0, b""),
              PlaybackEvent("idle", "p3", "song", "TIMEOUT", 3, 45_000, 1, b"", 45_000),
              PlaybackEvent("split", "p2", "hit", "TIMEOUT", 2, 45_000, 2, b"", 45_000),
              PlaybackEvent("beats", "p5", "song", "TIMEOUT", 5, 60_000, 3, b"", 45_000)]
    [net], _ = logic.on_batch([("f", 2, timers)])
    assert net.counts == {("song", 0): [-1, -1, 1], ("hit", 1): [-1, -1, 1]}, "from the counters they were on"
    again = UserShardLogic.builder(tmp_path, shards=1)(logic.snapshot())
    assert again.records == {"idle": (3, "p3", "song", 0, False), "split": (2, "p2", "hit", 0, False),
                             "beats": (5, "p5", "song", 50_000, True), "stopped": (1, "p1", "song", 0, False)}
    assert again.salts == {}


def test_versions_beyond_64_bits_round_trip(tmp_path):
    """A version is any integer >= 0; orjson neither writes nor reads back beyond 64 bits."""
    log = ShardChangelog(tmp_path, "users-5")
    log.restore(None)
    big = [2**70, "p", "s", True]
    log.append({"a": rec(1)}, everything({"a": rec(1)}), 1)
    position = log.append({"b": big}, everything({}), 2)
    log.close()
    restored = ShardChangelog(tmp_path, "users-5").restore(position)
    assert restored == {"a": rec(1), "b": big} and type(restored["b"][0]) is int


def test_a_legacy_changelog_is_stored_in_the_current_format_at_the_next_barrier(tmp_path):
    """A position stored before snapshots carried their format resumes (its records in any shape
    of their time); the next barrier writes a new generation whose image holds every record in its
    current shape, and hands Bytewax a tagged snapshot, which resumes by its format alone."""
    log = ShardChangelog(tmp_path, "users-0")
    log.restore(None)
    old = {"a": [3, "p3", "song", True], "b": [2, "p2", "hit", 4, True, 1]}
    position = log.append(old, everything(old), 1)
    log.close()
    logic = UserShardLogic.builder(tmp_path, shards=1)(position)
    logic.on_batch([("f", 2, [PlaybackEvent("c", "p1", "song", "START", 1, 9, 0, b"")])])
    tag, stored = logic.snapshot()
    assert tag == FORMAT and stored[2] == position[2] + 1, "a new generation"
    image = ShardChangelog(tmp_path, "users-0")._read(tmp_path / f"users-0.g{stored[2]}.log", stored[3])
    assert image == {"a": [3, "p3", "song", 0, True], "b": [2, "p2", "hit", 4, True, 1], "c": [1, "p1", "song", 9, True]}


def test_a_tagged_snapshot_is_read_by_its_format_never_by_shape(tmp_path, monkeypatch):
    """What this code stored is read as its current shapes: the legacy reader is not called."""
    logic = UserShardLogic.builder(tmp_path, shards=1)(None)
    logic.on_batch([("f", 1, [PlaybackEvent("a", "p1", "song", "START", 1, 9, 0, b"")])])
    whole = UserShardLogic.builder(whole=True)(None)
    whole.on_batch([("f", 1, [PlaybackEvent("a", "p1", "song", "START", 1, 9, 0, b"")])])
    stored, stored_whole = logic.snapshot(), whole.snapshot()

    def legacy(_):
        raise AssertionError("a tagged snapshot was read as legacy")

    monkeypatch.setattr(user_stage, "from_legacy", legacy)
    assert UserShardLogic.builder(tmp_path, shards=1)(stored).records == {"a": (1, "p1", "song", 9, True)}
    assert UserShardLogic.builder(whole=True)(stored_whole).records == {"a": (1, "p1", "song", 9, True)}
