"""The player stage's one loop for both kinds of run: the kernel's rules take each result as the
parse kernel made it, eight fields, or nine in a run that groups its boards (the group's game key,
docs/semantics/boards.md 10), so the stage unpacks nothing of its own and both runs decide alike."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rankflow import _native
from rankflow.operators.player_stage import BoardChanges, PlayerShardLogic
from rankflow.state.board_rules import apply_result, rules
from rankflow.state.events import DeadLetter
from rankflow.state.score_events import parse_score_records
from tests.boards_example import ms

T = ms("2027-01-04 12:00:00.000")
H = 3_600_000


def line(player: str, match: str, points: int, played_at: int, received_at: int, region: str | None) -> bytes:
    event: dict[str, Any] = {"game_id": "g1", "match_id": match, "player_id": player, "points": points,
                             "played_at": played_at, "received_at": received_at}
    if region is not None:
        event["region"] = region
    return json.dumps(event).encode()


LINES = [
    line("ana", "m1", 10, T, T + 1000, "eu"),
    line("bo", "m1", 20, T, T + 1000, None),  # no group
    line("ana", "m2", 5, T + H, T + H, "us"),
    line("ana", "m1", 10, T, T + H + 1, "eu"),  # duplicate
    line("ana", "m1", 11, T, T + H + 2, "eu"),  # conflict
    line("bo", "m3", 7, T - 2 * 24 * H, T + 2 * H, "eu"),  # too old
    line("bo", "m4", 7, T + 3 * H, T + 2 * H, None),  # in the future
    line("cy", "m1", 0, T, T + 1000, "eu"),
]


def stage(events: list[Any]) -> tuple[list[Any], list[tuple[str, str, int, bytes]]]:
    """The stage's board entries per accepted result, and its dead letters (reason, partition, offset, raw)."""
    out, _ = PlayerShardLogic(None, None, 16).on_batch([("p0", 1, events)])
    entries = [e for item in out if item.__class__ is BoardChanges for e in item.entries]
    dead = [(d.reason, d.partition, d.offset, d.raw) for d in out if d.__class__ is DeadLetter]
    return entries, dead


@pytest.mark.parametrize("group_by", [None, "region"])
def test_the_stage_decides_as_the_rules_for_either_shape(group_by):
    events, refused = parse_score_records(LINES, range(100, 100 + len(LINES)), "p0", 1, None, group_by)
    assert refused == [] and {len(e) for e in events} == {8 if group_by is None else 9}
    records: dict[str, Any] = {}
    want_entries, want_dead = [], []
    for offset, e in enumerate(events, start=100):
        game, match, player, points, played_at, received_at = e[:6]
        group = e[8] if group_by is not None else None
        records[player], verdict, changes = apply_result(records.get(player), game, match, player, points,
                                                         played_at, received_at, group=group)
        if verdict == "accepted":
            want_entries.append((player, changes))
        elif verdict != "duplicate":
            want_dead.append((verdict, "p0", offset, LINES[offset - 100]))
    assert stage(events) == (want_entries, want_dead)
    assert [d[0] for d in want_dead] == ["conflict", "too_old", "in_future"]
    groups = {game for _, changes in want_entries for game, *_ in changes if "@" in game}
    assert groups == (set() if group_by is None else {"g1@region=eu", "g1@region=us"})


def test_a_group_of_none_is_no_group():
    """The ninth field None (a result without the group field) gives what the eight fields give."""
    event = ("g1", "m1", "ana", 10, T, T + 1000, 0, b"")
    assert rules().apply(None, event)[1:] == rules().apply(None, (*event, None))[1:]
    grouped = rules().apply(None, (*event, "g1@region=eu"))[2]
    assert [e[0] for e in grouped] == ["g1"] * 4 + ["g1@region=eu"] * 4  # the group's boards after the game's


def test_a_result_of_the_wrong_shape_is_refused():
    with pytest.raises(ValueError, match="a result is"):
        rules().apply(None, ("g1", "m1", "ana"))
    with pytest.raises(TypeError):
        rules().apply(None, ("g1", "m1", "ana", "10", T, T + 1000, 0, b""))


@pytest.mark.parametrize("group_by", [None, "region"])
def test_a_batch_through_the_kernel_decides_as_one_result_at_a_time(group_by):
    """``BoardRules.apply_all`` (the stage's loop in the kernel) against ``apply`` a result at a time:
    the same records (a held one changed in place, a new object put back), entries, verdict counts
    added to what the tally held, duplicates counted and the other refused results in input order."""
    events, _ = parse_score_records(LINES, range(100, 100 + len(LINES)), "p0", 1, None, group_by)
    kernel = rules()
    records: dict[str, Any] = {}
    want_entries, want_refused, want_tally, duplicates = [], [], {"accepted": 7}, 0
    for e in events:
        old = records.get(e[2])
        record, verdict, changes = kernel.apply(old, e)
        if record is not old:
            records[e[2]] = record
        want_tally[verdict] = want_tally.get(verdict, 0) + 1
        if verdict == "accepted":
            want_entries.append((e[2], changes))
        elif verdict == "duplicate":
            duplicates += 1
        else:
            want_refused.append((verdict, e))
    batched: dict[str, Any] = {}
    entries: list[Any] = []
    tally = {"accepted": 7}
    got_duplicates, refused = 0, []
    for part in (events[:3], tuple(events[3:])):  # a record made in one call, changed in the next
        n, more = kernel.apply_all(batched, part, entries, tally)
        got_duplicates, refused = got_duplicates + n, refused + more
    assert (entries, tally, got_duplicates, refused) == (want_entries, want_tally, duplicates, want_refused)
    assert duplicates == 1 and [v for v, _ in refused] == ["conflict", "too_old", "in_future"]
    assert {p: _native.record_unpack(r) for p, r in batched.items()} == {
        p: _native.record_unpack(r) for p, r in records.items()}
    with pytest.raises(ValueError, match="a result is"):
        kernel.apply_all({}, [("g1", "m1", "ana")], [], {})
