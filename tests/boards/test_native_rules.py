"""The per-player rules run in the Rust kernel (native/src/rules.rs, through state.board_rules):
held to the reference model (tests/boards_model.py) event by event, on generated logs that reach
every verdict, a player's identity window sliding (results forgotten), period retention dropping
a player's old days and weeks, and seasons (docs/semantics/boards.md sections 1 checks 7-8, 2, 3,
4, 7 and 9)."""

from __future__ import annotations

import copy
import pickle

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rankflow.state.board_rules import (DAY_MS, FORGET_SLACK_MS, Verdict, apply_result, is_kept, is_single, loaded,
                                        newest_periods, rank_key, standings, stored, unpack)
from rankflow.state.score_events import parse_score_records
from rankflow.state.seasons import parse_seasons
from tests.boards_example import ms, result
from tests.boards_model import BoardsModel

H = 3_600_000
T0 = ms("2026-12-27 20:00:00.000")  # a week and a year end ahead: days, ISO weeks and years change
PLAYERS = ("a", "b", "é", "🎮")
GAMES = ("g1", "g|2")
SEASONS = parse_seasons({"xmas": {"start": "2026-12-24", "end": "2026-12-29T06:00:00Z"},
                         "jan": {"start": "2027-01-01", "end": "2027-02-01"}})
MODEL_SEASONS = {s.board[len("season:"):]: (s.start, s.end) for s in SEASONS}
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def logs(draw: st.DrawFn) -> list[bytes]:
    """Valid results in arrival order: new results, resubmissions (duplicates), the same identity
    with other points or played_at (conflicts), results played over 24 h before the player's
    newest receipt (too old) or over 60 s after their own receipt (in the future), zeros, and
    clocks that run hours to days ahead (the window slides, periods get dropped)."""
    clock, lines, sent = T0, [], []
    for _ in range(draw(st.integers(1, 50))):
        clock += draw(st.sampled_from([0, 1000, H, 5 * H, 13 * H, 2 * DAY_MS, 4 * DAY_MS]))
        kind = draw(st.sampled_from(["new"] * 6 + ["again", "conflict", "old", "future"])) if sent else "new"
        if kind in ("again", "conflict"):
            game, match, player, points, played = draw(st.sampled_from(sent))
            if kind == "conflict":
                points, played = draw(st.sampled_from([((points + 1) % 10001, played), (points, played - 1)]))
        else:
            game, player = draw(st.sampled_from(GAMES)), draw(st.sampled_from(PLAYERS))
            match = f"m{draw(st.integers(0, 6))}"  # few matches: identities come back after the window
            points = draw(st.sampled_from([0, 0, 1, 7, 50, 10000]))
            played = clock - draw(st.sampled_from([0, 0, 1, H, 23 * H, DAY_MS]))
            if kind == "old":
                played = clock - DAY_MS - draw(st.sampled_from([1, H, 3 * DAY_MS]))
            elif kind == "future":
                played = clock + draw(st.sampled_from([60_000, 60_001, H]))
        sent.append((game, match, player, points, played))
        lines.append(result(player, match, points, played, max(0, clock), game=game))
    return lines


def rules_run(lines: list[bytes], seasons: tuple = (), roundtrip: bool = False):
    """Every line through the kernel's rules: the verdicts in order, each player's latest entry per
    board, and the records. ``roundtrip``: every record through its changelog form between events."""
    events, dead = parse_score_records(lines, range(len(lines)), "p0", 1, None)
    assert dead == []
    records: dict = {}
    verdicts, latest = [], {}
    for game, match, player, points, played_at, received_at, _, _ in events:
        record, verdict, entries = apply_result(records.get(player), game, match, player, points, played_at,
                                                received_at, seasons)
        records[player] = loaded(orjson.loads(orjson.dumps(stored(record)))) if roundtrip else record
        verdicts.append(verdict)
        for g, board, score, reached_at, _ in entries:
            latest[(g, board, player)] = (score, reached_at)
    return verdicts, latest, records


def kept_boards(latest: dict, seasons: tuple = ()) -> dict:
    """The boards a merger keeps from the entries (section 7: the newest periods are the greatest)."""
    newest = {g: newest_periods(b for g2, b, _ in latest if g2 == g) for g, _, _ in latest}
    ends = {s.board: s.last_day for s in seasons}
    boards: dict = {}
    for (game, board, player), (score, reached_at) in latest.items():
        if is_kept(board, *newest[game], ends):
            boards.setdefault(game, {}).setdefault(board, []).append((player, score, reached_at))
    for games in boards.values():
        for entries in games.values():
            entries.sort(key=lambda e: rank_key(e[1], e[2], e[0]))
    return boards


def model_of(lines: list[bytes], seasons: dict | None = None) -> BoardsModel:
    model = BoardsModel(None, seasons)
    for offset, line in enumerate(lines):
        model.feed(line, "p0", offset)
    return model


@SETTINGS
@given(logs(), st.booleans())
def test_the_kernel_decides_every_event_and_board_as_the_model(lines, roundtrip):
    verdicts, latest, records = rules_run(lines, roundtrip=roundtrip)
    model = model_of(lines)
    assert verdicts == model.outcomes  # every verdict, event by event
    assert kept_boards(latest) == model.boards()
    for player, record in records.items():  # the standings a record holds are its entries' last word
        for game, board, score, reached_at in standings(record):
            assert latest[(game, board, player)] == (score, reached_at)


@SETTINGS
@given(logs(), st.booleans())
def test_the_kernel_gives_the_models_season_boards(lines, roundtrip):
    verdicts, latest, _ = rules_run(lines, SEASONS, roundtrip)
    model = model_of(lines, MODEL_SEASONS)
    assert verdicts == model.outcomes
    assert kept_boards(latest, SEASONS) == model.boards()


@SETTINGS
@given(logs())
def test_a_record_is_its_list_form_and_pickles(lines):
    """The list form says all a record holds (packed back, it is the same record), and a held
    record pickles and copies (Bytewax snapshots and the tests' copies)."""
    _, _, records = rules_run(lines)
    for record in records.values():
        assert loaded(stored(record)) == record
        assert pickle.loads(pickle.dumps(record)) == record and copy.deepcopy(record) == record
        if not is_single(record):
            r, oldest, results, _ = unpack(record)
            held = [t for matches in results.values() for _, t in matches.values()]
            assert oldest <= min(held, default=1 << 62)  # a bound: when to scan next
            assert all(t >= r - DAY_MS - FORGET_SLACK_MS for t in held)  # the window, give or take the slack


def test_the_logs_reach_every_verdict_a_sliding_window_retention_and_seasons():
    """The properties above are only as good as their logs (a fixed seed set)."""
    seen: set[str] = set()

    @settings(max_examples=100, deadline=None, database=None, derandomize=True)
    @given(logs())
    def collect(lines):
        verdicts, latest, records = rules_run(lines, SEASONS)
        seen.update(verdicts)
        model = model_of(lines, MODEL_SEASONS)
        if any(model.dropped().values()):
            seen.add("retention")
        if any(b.startswith("season:") for _, b, _ in latest):
            seen.add("season")
        for record in records.values():
            if is_single(record):
                seen.add("single")
            elif len([1 for matches in unpack(record)[2].values() for _ in matches]) < len(
                    [v for v in verdicts if v == Verdict.ACCEPTED]):
                seen.add("forgotten or shared")
        for player in PLAYERS:
            mine = [v for v, line in zip(verdicts, lines) if orjson.loads(line)["player_id"] == player]
            if mine.count(Verdict.ACCEPTED) > 12:
                seen.add("heavy player")

    collect()
    assert seen >= set(Verdict.ALL) | {"retention", "season", "single", "forgotten or shared", "heavy player"}


def test_a_heavy_player_keeps_a_day_of_results_and_its_identities():
    """One result a minute for three days: each one accepted, its resubmission a duplicate, the
    record holding about a day of them (the index by match: no event reads them all)."""
    record = None
    for i in range(3 * 24 * 60):
        at = T0 + i * 60_000
        record, verdict, entries = apply_result(record, "g1", f"m{i}", "p", 1, at, at + 500)
        assert verdict == Verdict.ACCEPTED and entries[0][1:4] == ("all", i + 1, at)
        assert apply_result(record, "g1", f"m{i}", "p", 1, at, at + 900)[1] == Verdict.DUPLICATE
    held = unpack(record)[2]["g1"]
    assert 24 * 60 <= len(held) <= 30 * 60 + 1
    assert apply_result(record, "g1", "m0", "p", 1, T0 + 3 * DAY_MS, T0 + 3 * DAY_MS)[1] == Verdict.ACCEPTED
