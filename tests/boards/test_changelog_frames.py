"""The player shards' changelog frames and images as the kernel writes them (native/src/changes.rs).

The oracle is the Python writer the flow used before (kept here, :class:`PythonFrames`): per
player a piece of the results accepted and the boards they changed since the last barrier, or the
record whole when it was new or single when the barrier began. The kernel's frames must hold
what that writer's held (the same JSON value), its images the records' stored forms, and a state
rebuilt from them (``merge_piece``, ``loaded``) must decide later results as the live records and
the reference model do. A changelog written by that writer (a recovery directory of the code
before) resumes with the kernel's stage exactly as one the kernel wrote.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from rankflow import _native
from rankflow.connectors.changelog import ShardChangelog
from rankflow.operators.keyed_shards import FORMAT
from rankflow.operators.player_stage import PlayerShardLogic
from rankflow.state.board_rules import (Verdict, forget_expired, is_single, loaded, merge_piece, rules, stored,
                                        unpack)
from rankflow.state.score_events import ScoreEvent
from tests.boards.test_packed_records import (FAST, PARTITION, T0, apply_result, boards_of, events_of, fold,
                                              in_effect, model_of, result, score_logs)

GROUPS = (None, "g1@mode=duo", "g1@mode=solo")


class PythonFrames:
    """The changelog writer of the code before the kernel wrote frames: a Python dict of pieces
    per changed player, finished at the barrier from the record's list form."""

    def __init__(self) -> None:
        self.pieces: dict[str, dict[str, Any]] = {}

    def note(self, old: Any, record: Any, event: tuple[Any, ...], verdict: str, changes: tuple[Any, ...]) -> None:
        player = event[2]
        if record is not old:  # a new record, or a single one now held: written whole
            self.pieces[player] = {"W": 1}
        piece = self.pieces.setdefault(player, {})
        if verdict != Verdict.ACCEPTED or "W" in piece:
            return
        if not piece:
            piece["r"], piece["n"] = {}, {}
        game = event[0]
        piece["r"].setdefault(game, {})[event[1]] = [event[3], event[4]]
        noted = piece["n"].setdefault(game, set())
        for change in changes:
            if change[0] != game:  # a group's board: its own game key
                piece["n"].setdefault(change[0], set()).add(change[1])
            else:
                noted.add(change[1])

    def frame(self, records: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for player, piece in self.pieces.items():
            record = records[player]
            if "W" in piece or is_single(record):
                out[player] = stored(record)
                continue
            noted = piece.pop("n", None)
            piece["R"] = [record.r, record.oldest]
            if noted:
                boards = unpack(record)[3]
                piece["b"] = {game: {b: boards[game][b] for b in names if b in boards[game]}
                              for game, names in noted.items() if game in boards}
            out[player] = piece
        self.pieces = {}
        return orjson.loads(orjson.dumps(out))


def grouped(events: list[ScoreEvent], groups: list[str | None]) -> list[tuple[Any, ...]]:
    """The events of a run that groups its boards: a ninth field, the result's group's game key."""
    return [(*e, group) for e, group in zip(events, groups)]


def rebuilt(frames: list[bytes]) -> dict[str, Any]:
    """The records a changelog of these frames restores to (``connectors.changelog`` with the stage's merge)."""
    records: dict[str, Any] = {}
    for frame in frames:
        for player, value in orjson.loads(frame).items():
            records[player] = merge_piece(records.get(player), value)
    return {p: forget_expired(loaded(r)) for p, r in records.items()}


@FAST
@given(score_logs(), st.data())
def test_the_kernels_frames_hold_what_the_python_writer_wrote(lines, data):
    """Barriers anywhere, results with and without a group: each frame the kernel writes is, as
    JSON, the frame the Python writer made; an image is every record's stored form; the records
    rebuilt from the frames decide as the live ones, and the boards are the model's."""
    events = events_of(lines)
    groups = data.draw(st.lists(st.sampled_from(GROUPS), min_size=len(events), max_size=len(events)))
    items = grouped(events, groups)
    cuts = set(data.draw(st.sets(st.integers(1, len(items)), max_size=6))) | {len(items)}
    apply = rules(()).apply
    records: dict[str, Any] = {}
    noted, model = _native.PlayerChanges(), PythonFrames()
    frames: list[bytes] = []
    for at, event in enumerate(items, 1):
        old = records.get(event[2])
        record, verdict, changes = apply(old, event, noted)
        records[event[2]] = record
        model.note(old, record, event, verdict, changes)
        if at in cuts:
            frame = noted.frame(records)
            assert len(noted) == 0
            assert orjson.loads(frame) == model.frame(records)
            frames.append(frame)
    image = _native.board_image(records)
    assert orjson.loads(image) == orjson.loads(orjson.dumps({p: stored(r) for p, r in records.items()}))
    assert {p: in_effect(r) for p, r in rebuilt(frames).items()} == {p: in_effect(r) for p, r in records.items()}
    assert {p: in_effect(r) for p, r in rebuilt([image]).items()} == {p: in_effect(r) for p, r in records.items()}
    if not any(groups):
        outcomes, live = fold(apply_result, events)
        assert {p: in_effect(r) for p, r in rebuilt(frames).items()} == {p: in_effect(r) for p, r in live.items()}
        assert boards_of(events, outcomes) == model_of(lines).boards()


def test_an_id_that_json_must_escape_round_trips():
    """Ids with quotes, backslashes and control characters: the kernel's JSON reads back to them."""
    lines = [result('a"\\\n\t\x01é', 'm"1', 5, T0, T0 + 1000, game="g\\1"),
             result('a"\\\n\t\x01é', "m2", 7, T0 + 1, T0 + 2000, game="g\\1")]
    events = events_of(lines)
    records: dict[str, Any] = {}
    noted = _native.PlayerChanges()
    frames = []
    for event in events:
        records[event[2]] = rules(()).apply(records.get(event[2]), event, noted)[0]
        frames.append(noted.frame(records))
    assert rebuilt(frames) == {events[0][2]: records[events[0][2]]}
    assert orjson.loads(_native.board_image(records)) == orjson.loads(orjson.dumps(
        {p: stored(r) for p, r in records.items()}))


def test_nothing_changed_is_an_empty_frame():
    assert _native.PlayerChanges().frame({}) == b""


@FAST
@given(score_logs(), score_logs(), st.data())
def test_a_changelog_the_python_writer_wrote_resumes_as_the_kernels(tmp_path_factory, before, after, data):
    """A recovery directory of the code before (its changelog of Python-written frames, an image
    at its first barrier): the kernel's stage resumes from it with the live records in effect and
    decides later results as a stage that never stopped."""
    directory: Path = tmp_path_factory.mktemp("changelog")
    events = events_of(before)
    cuts = sorted(set(data.draw(st.sets(st.integers(1, len(events)), max_size=4))) | {len(events)})
    apply = rules(()).apply
    records: dict[str, Any] = {}
    model, log = PythonFrames(), ShardChangelog(directory, "users-0", merge_piece)
    log.restore(None)
    position = None
    start = 0
    for epoch, cut in enumerate(cuts, 1):
        for event in events[start:cut]:
            old = records.get(event[2])
            record, verdict, changes = apply(old, event)
            records[event[2]] = record
            model.note(old, record, event, verdict, changes)
        start = cut
        position = log.append(model.frame(records), lambda: {p: stored(r) for p, r in records.items()}, epoch)
    log.close()
    stage = PlayerShardLogic((FORMAT, position), directory, 1)
    assert {p: in_effect(r) for p, r in stage.records.items()} == {p: in_effect(r) for p, r in records.items()}
    later = events_of(before + after)[len(events):]
    out, _ = stage.on_batch([(PARTITION, len(cuts) + 1, later)])
    expected = fold(apply_result, later, records)[0]
    entries = [e for item in out if item.__class__.__name__ == "BoardChanges" for e in item.entries]
    assert entries == [(ev[2], e) for ev, (v, e) in zip(later, expected) if v == Verdict.ACCEPTED]
    stage.snapshot()
    if stage.changelog is not None:
        stage.changelog.close()
