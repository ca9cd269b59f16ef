"""The reference model holds docs/semantics/boards.md's text, and the rules (state.*) agree with it on random logs."""

from __future__ import annotations

import datetime
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import boards_example as example
from tests.boards_example import ms, result
from tests.boards_model import BoardsModel, around, rank_and_competition
from tests.boards.test_board_rules import boards_via_rules

DAY = 86_400_000
H = 3_600_000
T0 = ms("2026-12-24 00:00:00.000")


def model_of(lines: list[bytes], key: bytes | None, partition: str = "p0") -> BoardsModel:
    model = BoardsModel(key)
    for offset, raw in enumerate(lines):
        model.feed(raw, partition, offset)
    return model


# -- section 8 --------------------------------------------------------------------

def test_worked_example_outcomes():
    model = model_of(example.LINES, example.KEY, example.PARTITION)
    assert model.outcomes == example.OUTCOMES
    assert model.dead_letters == [("conflict", example.PARTITION, 6), ("bad_signature", example.PARTITION, 8)]
    assert model.duplicates == 1


def test_worked_example_boards_ranks_and_aliases():
    model = model_of(example.LINES, example.KEY, example.PARTITION)
    boards = model.boards()["g1"]
    assert {name: rank_and_competition(entries) for name, entries in boards.items()} == example.BOARDS
    assert {p: reached for p, _, reached in boards["all"]} == example.REACHED_ON_ALL
    assert model.aliases() == {"g1": example.ALIASES}


def test_worked_example_queries():
    boards = model_of(example.LINES, example.KEY).boards()["g1"]
    assert around(boards["all"], "eve", 1) == [("dee", 50, 4, 1), ("eve", 0, 5, 5)]
    assert around(boards["daily:2027-01-03"], "ana", 3) is None
    assert around(boards["all"], "bo", 0) == [("bo", 50, 2, 1)]
    with pytest.raises(ValueError):
        around(boards["all"], "bo", 51)


def test_without_a_key_the_forged_result_counts():
    model = model_of(example.LINES, None)
    assert model.outcomes[8] == "accepted" and model.boards()["g1"]["best"][0] == ("eve", 900, ms("2027-01-04 13:00"))


def test_a_duplicate_may_differ_in_received_at_sig_and_other_fields():
    first = {"game_id": "g1", "match_id": "m1", "player_id": "ana", "points": 5, "played_at": T0, "received_at": T0}
    again = {**first, "received_at": T0 + 5000, "sig": "whatever", "server": "eu-2"}
    lines = [json.dumps(first).encode(), json.dumps(again).encode()]
    model = model_of(lines, None)
    assert model.outcomes == ["accepted", "duplicate"] and model.duplicates == 1 and model.dead_letters == []
    boards, _, dead, duplicates = boards_via_rules(lines, None)
    assert (boards, dead, duplicates) == (model.boards(), [], 1)


# -- section 7 --------------------------------------------------------------------

def days_log() -> list[bytes]:
    """Players d0..d10 play one result each on 2026-12-25 .. 2027-01-04, then late results arrive."""
    start = ms("2026-12-25 12:00:00.000")
    lines = [result(f"d{i}", "m", 10 + i, start + i * DAY, start + i * DAY + 1000) for i in range(11)]
    late = ms("2026-12-26 08:00:00.000")  # a dropped day, in a dropped week
    lines.append(result("late", "m", 99, late, late + 1000))
    kept = ms("2026-12-28 08:00:00.000")  # the oldest kept day, in the older kept week
    lines.append(result("late2", "m", 7, kept, kept + 1000))
    return lines


def test_retention_keeps_eight_days_and_two_weeks():
    model = model_of(days_log(), example.KEY)
    boards = model.boards()["g1"]
    assert sorted(b for b in boards if b.startswith("daily:")) == [
        f"daily:{datetime.date(2026, 12, 28) + datetime.timedelta(days=i)}" for i in range(8)]
    assert sorted(b for b in boards if b.startswith("weekly:")) == ["weekly:2026-W53", "weekly:2027-W01"]
    assert model.aliases() == {"g1": {"daily": "daily:2027-01-04", "weekly": "weekly:2027-W01"}}


def test_a_late_result_for_a_dropped_period_counts_on_all_and_best_only():
    model = model_of(days_log(), example.KEY)
    assert model.outcomes[-2:] == ["accepted", "accepted"]
    boards = model.boards()["g1"]
    assert boards["all"][0][:2] == ("late", 99) and boards["best"][0][:2] == ("late", 99)
    assert not any(p == "late" for name, entries in boards.items() if name not in ("all", "best")
                   for p, _, _ in entries)
    assert ("late2", 7) in [(p, s) for p, s, _ in boards["daily:2026-12-28"]]
    assert ("late2", 7) in [(p, s) for p, s, _ in boards["weekly:2026-W53"]]


def test_retention_through_the_rules():
    lines = days_log()
    model = model_of(lines, example.KEY)
    boards, aliases, dead, _ = boards_via_rules(lines, example.KEY)
    assert boards == model.boards() and aliases == model.aliases() and dead == []


# -- the rules against the model ----------------------------------------------------------------------

GAMES = ["g1", "g|1:x"]
PLAYERS = ["ana", "bo", "é", "🎮", "～", "p|1"]  # 🎮 sorts after ～ by code point, before in UTF-16
GARBAGE = [b"{", b"[]", b'{"game_id": "g1"}', b'{"x": NaN}', b'{"x": "\\ud83c"}', b"\xff",
           json.dumps({"game_id": "g1", "match_id": "m", "player_id": "ana", "points": 10.0, "played_at": T0,
                       "received_at": T0}).encode()]

events = st.tuples(
    st.sampled_from(GAMES),
    st.sampled_from(["m1", "m2", "m3"]),
    st.sampled_from(PLAYERS),
    st.sampled_from([0, 0, 1, 5, 50, 10000]),
    st.integers(0, 48).map(lambda n: T0 + n * 9 * H) | st.sampled_from([T0, T0 + 999, T0 + DAY - 1]),  # 18 days
    st.sampled_from([0, 1000, 1000, 1000, 60000, -60000, -60001, DAY, DAY + 1, 5 * DAY]),  # received - played
    st.sampled_from(["ok"] * 8 + ["forged", "garbage"]),
    st.integers(0, len(GARBAGE) - 1),
    st.sampled_from([0] * 6 + [-6 * H, 6 * H, -30 * H, 30 * H, -5 * DAY]),  # how far out of order it arrives
)


def log_of(drawn, key: bytes | None) -> list[bytes]:
    """Lines roughly in time order (as logs are), some arriving hours or days out of it."""
    lines = []
    for game, match, player, points, played_at, delta, kind, garbage, _ in sorted(drawn, key=lambda e: e[4] + e[8]):
        received_at = max(0, played_at + delta)
        if kind == "garbage":
            lines.append(GARBAGE[garbage])
        else:
            lines.append(result(player, match, points, played_at, received_at, game=game, key=key or b"k",
                                signed_points=points + 1 if kind == "forged" else None))
    return lines


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(events, max_size=60), st.booleans(), st.booleans())
def test_rules_give_the_models_boards(drawn, with_key, roundtrip):
    key = example.KEY if with_key else None
    lines = log_of(drawn, key)
    model = model_of(lines, key)
    boards, aliases, dead, duplicates = boards_via_rules(lines, key, roundtrip=roundtrip)
    assert boards == model.boards()
    assert aliases == model.aliases()
    assert dead == model.dead_letters
    assert duplicates == model.duplicates


SEASONS = {"xmas": ("2026-12-24T12:00:00Z", "2026-12-27"), "jan": ("2027-01-01", "2027-02-01"),
           "short": ("2026-12-30T10:00:00+02:00", "2026-12-30T10:00:00.001+02:00")}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(events, max_size=60), st.booleans())
def test_rules_give_the_models_season_boards(drawn, roundtrip):
    """Section 9.1: the rules with seasons (overlapping days and weeks, a 1 ms one) against the model."""
    from rankflow.state.seasons import parse_seasons

    seasons = parse_seasons({name: {"start": a, "end": b} for name, (a, b) in SEASONS.items()})
    lines = log_of(drawn, example.KEY)
    model = BoardsModel(example.KEY, {s.board[len("season:"):]: (s.start, s.end) for s in seasons})
    for offset, raw in enumerate(lines):
        model.feed(raw, "p0", offset)
    boards, aliases, dead, _ = boards_via_rules(lines, example.KEY, roundtrip=roundtrip, seasons=seasons)
    assert boards == model.boards()
    assert aliases == model.aliases() and dead == model.dead_letters
