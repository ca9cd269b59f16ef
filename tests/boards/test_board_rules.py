"""The per-player board rules alone (state.board_rules), one docs/semantics/boards.md clause at a time."""

from __future__ import annotations

import datetime

import orjson
import pytest

from rankflow.state.board_rules import (
    BOARDS,
    DAY_MS,
    DETAILS,
    FORGET_SLACK_MS,
    RESULTS,
    Verdict,
    apply_result,
    day_of,
    is_kept,
    kept_daily,
    kept_weekly,
    loaded,
    rank_key,
    standings,
    stored,
    unpack,
    week_of,
)
from rankflow.state import board_rules as br
from rankflow.state.score_events import parse_score_records
from tests import boards_example as example
from tests.boards_example import ms

T = ms("2027-01-02 10:00:00.000")
H = 3_600_000


def play(record, match, points, played_at, received_at=None, game="g1"):
    """One result of player "p" (received 1 s after it was played unless told), on a record
    in its list form: packed back into the kernel's bytes first (so every step also checks
    that the list form says all the record holds), the record returned in its list form."""
    received_at = played_at + 1000 if received_at is None else received_at
    record = loaded(record) if isinstance(record, list) else record
    record, verdict, entries = apply_result(record, game, match, "p", points, played_at, received_at)
    return unpack(record), verdict, entries


def boards_via_rules(lines: list[bytes], key: bytes | None, partition: str = "p0", roundtrip: bool = False,
                     seasons: tuple = ()):
    """Boards built the way the flow will: parse, apply per player, keep each player's last entry per board.

    Returns ``(boards, aliases, dead, duplicates)`` shaped like the model's answers:
    ``boards`` has only the periods each game keeps, entries sorted by :func:`rank_key`.
    With ``roundtrip`` every record goes through orjson between events, as a changelog would.
    ``seasons``: ``state.seasons.Season`` tuples (docs/semantics/boards.md 9).
    """
    events, dead_letters = parse_score_records(lines, range(len(lines)), partition, 1, key)
    dead = [(d.reason, d.partition, d.offset) for _, d in dead_letters]
    records: dict[str, list] = {}
    latest: dict[tuple[str, str, str], tuple[int, int]] = {}
    days: dict[str, str] = {}
    weeks: dict[str, str] = {}
    duplicates = 0
    for game, match, player, points, played_at, received_at, offset, _ in events:
        record, verdict, entries = apply_result(records.get(player), game, match, player, points, played_at,
                                                received_at, seasons)
        records[player] = loaded(orjson.loads(orjson.dumps(stored(record)))) if roundtrip else record
        if verdict in Verdict.DEAD:
            dead.append((verdict, partition, offset))
        duplicates += verdict == Verdict.DUPLICATE
        if verdict == Verdict.ACCEPTED:
            days[game] = max(days.get(game, ""), day_of(played_at))
            weeks[game] = max(weeks.get(game, ""), week_of(played_at))
        for g, board, score, reached_at, _new in entries:
            latest[(g, board, player)] = (score, reached_at)
    for game in days:  # what a merger sees: the newest periods are the greatest boards in the entries
        assert max(b for g, b, _ in latest if g == game and b.startswith("daily:")) == f"daily:{days[game]}"
        assert max(b for g, b, _ in latest if g == game and b.startswith("weekly:")) == f"weekly:{weeks[game]}"
    boards: dict[str, dict[str, list]] = {}
    for (game, board, player), (score, reached_at) in latest.items():
        if is_kept(board, days[game], weeks[game], {season.board: season.last_day for season in seasons}):
            boards.setdefault(game, {}).setdefault(board, []).append((player, score, reached_at))
    for games in boards.values():
        for entries in games.values():
            entries.sort(key=lambda e: rank_key(e[1], e[2], e[0]))
    aliases = {g: {"daily": f"daily:{days[g]}", "weekly": f"weekly:{weeks[g]}"} for g in days}
    return boards, aliases, sorted(dead, key=lambda d: d[2]), duplicates


# -- section 8 --------------------------------------------------------------------

def test_worked_example_through_the_rules():
    boards, aliases, dead, duplicates = boards_via_rules(example.LINES, example.KEY, example.PARTITION)
    assert aliases == {"g1": example.ALIASES}
    assert {b: [(p, s) for p, s, _ in entries] for b, entries in boards["g1"].items()} == {
        b: [(p, s) for p, s, _, _ in rows] for b, rows in example.BOARDS.items()}
    assert {p: reached for p, _, reached in boards["g1"]["all"]} == example.REACHED_ON_ALL
    assert dead == [("conflict", example.PARTITION, 6), ("bad_signature", example.PARTITION, 8)]
    assert duplicates == 1


def test_worked_example_verdicts_and_entries():
    events, dead = parse_score_records(example.LINES, range(9), example.PARTITION, 1, example.KEY)
    assert [d.offset for _, d in dead] == [8]
    records: dict = {}
    verdicts = []
    for game, match, player, points, played_at, received_at, _, _ in events:
        records[player], verdict, entries = apply_result(records.get(player), game, match, player, points,
                                                         played_at, received_at)
        verdicts.append(verdict)
        if player == "bo" and match == "m3":  # played 2027-01-03 23:59:59.999, received after midnight
            assert [e[1:] for e in entries] == [
                ("all", 50, ms("2027-01-03 23:59:59.999"), False),
                ("daily:2027-01-03", 20, ms("2027-01-03 23:59:59.999"), True),
                ("weekly:2026-W53", 50, ms("2027-01-03 23:59:59.999"), False)]
    assert verdicts == [o for o in example.OUTCOMES if o != "bad_signature"]


# -- checks 7 and 8 -----------------------------------------------------------------

def test_too_old_against_this_events_own_receipt():
    assert play(None, "m", 5, T, T + DAY_MS)[1] == Verdict.ACCEPTED  # exactly 24 h: still in
    assert play(None, "m", 5, T, T + DAY_MS + 1)[1:] == (Verdict.TOO_OLD, ())


def test_too_old_against_an_earlier_receipt_of_the_player():
    record = play(None, "m1", 5, T + 3 * DAY_MS)[0]  # R = T + 3 days + 1 s
    record, verdict, entries = play(record, "m2", 5, T, T + 1000)  # received soon after it was played
    assert (verdict, entries) == (Verdict.TOO_OLD, ())
    assert record[0] == T + 3 * DAY_MS + 1000  # R is a maximum: an older receipt does not lower it


def test_in_future():
    assert play(None, "m", 5, T + 60000, T)[1] == Verdict.ACCEPTED  # exactly 60 s: still in
    assert play(None, "m", 5, T + 60001, T)[1:] == (Verdict.IN_FUTURE, ())


def test_too_old_is_checked_before_in_future():
    record = play(None, "m1", 5, T + 3 * DAY_MS)[0]
    assert play(record, "m2", 5, T + 2 * H, T)[1] == Verdict.TOO_OLD  # both: 7 comes first


def test_a_rejected_event_still_moves_r():
    record, verdict, _ = play(None, "m1", 5, T + 5 * DAY_MS, T + 3 * DAY_MS)  # in the future, but valid 1-6
    assert verdict == Verdict.IN_FUTURE and record[0] == T + 3 * DAY_MS
    assert play(record, "m2", 5, T + H)[1] == Verdict.TOO_OLD


def test_duplicates_and_conflicts_also_move_r():
    record = play(None, "m1", 5, T)[0]
    record, verdict, _ = play(record, "m1", 5, T, T + H)
    assert verdict == Verdict.DUPLICATE and record[0] == T + H
    record = play(None, "m1", 5, T)[0]
    record, verdict, _ = play(record, "m1", 6, T, T + H)
    assert verdict == Verdict.CONFLICT and record[0] == T + H


def test_details_name_each_dead_verdict():
    assert set(DETAILS) == Verdict.DEAD == {"too_old", "in_future", "conflict"}
    assert Verdict.ALL == ("accepted", "duplicate", "too_old", "in_future", "conflict")


# -- section 2: identity -----------------------------------------------------------

def test_duplicate_ignores_received_at_and_changes_nothing():
    record = play(None, "m1", 5, T)[0]
    before = orjson.dumps(record[1:])
    record, verdict, entries = play(record, "m1", 5, T, T + 30000)
    assert (verdict, entries) == (Verdict.DUPLICATE, ()) and orjson.dumps(record[1:]) == before


@pytest.mark.parametrize("points,played_at", [(6, T), (5, T + 1), (0, T - H)])
def test_conflict_keeps_the_first(points, played_at):
    record = play(None, "m1", 5, T)[0]
    record, verdict, entries = play(record, "m1", points, played_at, T + 5000)
    assert (verdict, entries) == (Verdict.CONFLICT, ())
    assert [s for s in standings(loaded(record)) if s[1] == "all"] == [("g1", "all", 5, T)]


def test_identity_is_per_game_and_match():
    record = play(None, "m1", 5, T)[0]
    assert play(record, "m2", 5, T)[1] == Verdict.ACCEPTED
    assert play(record, "m1", 7, T, game="g2")[1] == Verdict.ACCEPTED


def test_rejected_events_leave_no_identity():
    record = play(None, "m1", 5, T + 2 * H, T)[0]  # in_future
    assert play(record, "m1", 9, T)[1] == Verdict.ACCEPTED  # not a conflict with the rejected one


def test_identity_forgotten_after_24h_of_receipts():
    record = play(None, "m1", 5, T)[0]
    later = T + DAY_MS + 2000  # R now puts the first result out of the window
    record = play(record, "m2", 1, later)[0]
    assert play(record, "m1", 5, T, later)[1] == Verdict.TOO_OLD  # its duplicate is too old anyway
    record, verdict, entries = play(record, "m1", 7, later + 1, later + 2)  # same identity, newer: a new result
    assert verdict == Verdict.ACCEPTED
    assert [e for e in entries if e[1] == "all"] == [("g1", "all", 5 + 1 + 7, later + 1, False)]
    assert play(record, "m1", 7, later + 1, later + 3)[1] == Verdict.DUPLICATE  # and that one is remembered


def test_identity_still_remembered_just_inside_the_window():
    record = play(None, "m1", 5, T)[0]
    record = play(record, "m2", 1, T + DAY_MS - 5000)[0]  # R = T + 24 h - 4 s: m1 still inside
    assert play(record, "m1", 5, T + 60000, T + DAY_MS - 4000)[1] == Verdict.CONFLICT


def test_the_identity_window_stays_about_a_day():
    record = None
    for i in range(24 * 10):  # one result an hour for ten days
        record, verdict, _ = play(record, f"m{i}", 1, T + i * H)
        assert verdict == Verdict.ACCEPTED
        held = [t for matches in record[RESULTS].values() for _, t in matches.values()]
        assert min(held) >= record[0] - DAY_MS - FORGET_SLACK_MS and len(held) <= 24 * 5 // 4 + 1


# -- sections 3 and 4: boards, scores, reached_at -------------------------------------------

def board_entries(entries, board):
    return [e[2:] for e in entries if e[1] == board]


def test_an_accepted_result_enters_its_four_boards():
    _, verdict, entries = play(None, "m1", 50, T)
    assert verdict == Verdict.ACCEPTED
    assert entries == (("g1", "all", 50, T, True), ("g1", "best", 50, T, True),
                       ("g1", "daily:2027-01-02", 50, T, True), ("g1", "weekly:2026-W53", 50, T, True))


def test_sum_boards_reach_their_score_at_the_last_positive_result():
    record = play(None, "m1", 10, T)[0]
    record, _, entries = play(record, "m2", 5, T - H)  # late arrival, played earlier: reached_at stays T
    assert board_entries(entries, "all") == [(15, T, False)]
    record, _, entries = play(record, "m3", 0, T + H)  # a 0 changes neither score nor reached_at
    assert board_entries(entries, "all") == []


def test_zero_point_results():
    record, _, entries = play(None, "m1", 0, T)
    assert board_entries(entries, "all") == [(0, T, True)] and board_entries(entries, "best") == [(0, T, True)]
    record, _, entries = play(record, "m2", 0, T + H)  # later 0: joined at T still
    assert entries == ()
    record, _, entries = play(record, "m3", 0, T - H)  # earlier 0: joined earlier
    assert board_entries(entries, "all") == [(0, T - H, False)]
    assert board_entries(entries, "best") == [(0, T - H, False)]
    record, _, entries = play(record, "m4", 3, T - 2 * H)  # first points: reached when they came
    assert board_entries(entries, "all") == [(3, T - 2 * H, False)]


def test_best_only_rises_and_an_equal_result_can_only_make_it_earlier():
    record = play(None, "m1", 50, T)[0]
    record, _, entries = play(record, "m2", 40, T - H)
    assert board_entries(entries, "best") == []
    record, _, entries = play(record, "m3", 50, T + H)
    assert board_entries(entries, "best") == []
    record, _, entries = play(record, "m4", 50, T - H)
    assert board_entries(entries, "best") == [(50, T - H, False)]
    record, _, entries = play(record, "m5", 51, T + 2 * H)
    assert board_entries(entries, "best") == [(51, T + 2 * H, False)]


def test_period_comes_from_played_at_not_received_at():
    last_ms = ms("2027-01-03 23:59:59.999")
    _, _, entries = play(None, "m", 20, last_ms, ms("2027-01-04 00:00:03.000"))
    assert {e[1] for e in entries} == {"all", "best", "daily:2027-01-03", "weekly:2026-W53"}


@pytest.mark.parametrize("when,day,week", [
    ("2026-12-28 00:00:00.000", "2026-12-28", "2026-W53"),
    ("2027-01-03 23:59:59.999", "2027-01-03", "2026-W53"),
    ("2027-01-04 00:00:00.000", "2027-01-04", "2027-W01"),
    ("2024-12-29 23:59:59.999", "2024-12-29", "2024-W52"),
    ("2024-12-30 00:00:00.000", "2024-12-30", "2025-W01"),
    ("2025-01-01 12:00:00.000", "2025-01-01", "2025-W01"),
    ("1970-01-01 00:00:00.000", "1970-01-01", "1970-W01"),
    ("9999-12-31 23:59:59.999", "9999-12-31", "9999-W52"),
])
def test_days_and_iso_weeks(when, day, week):
    assert (day_of(ms(when)), week_of(ms(when))) == (day, week)


def test_every_day_of_many_years_matches_datetime():
    start = datetime.date(1970, 1, 1)
    for n in list(range(0, 6000)) + list(range(2_920_000, 2_932_897)):  # more than the period cache holds
        date = start + datetime.timedelta(days=n)
        year, week, _ = date.isocalendar()
        played_at = n * DAY_MS + (n * 7919) % DAY_MS
        assert (day_of(played_at), week_of(played_at)) == (date.isoformat(), f"{year:04d}-W{week:02d}")


def test_rank_key_is_section_4_order():
    entries = [("bo", 50, T), ("ana", 50, T), ("cy", 60, T + H), ("z", 50, T - 1), ("é", 50, T), ("\uffff", 0, 0),
               ("🎮", 0, 0)]
    ordered = sorted(entries, key=lambda e: rank_key(e[1], e[2], e[0]))
    assert [e[0] for e in ordered] == ["cy", "z", "ana", "bo", "é", "\uffff", "🎮"]
    assert ordered == sorted(entries, key=lambda e: (-e[1], e[2], e[0].encode("utf-8")))  # UTF-8 byte order


# -- section 7: retention ---------------------------------------------------------

def test_kept_periods_are_eight_days_and_two_weeks():
    kept = [d for d in (f"2026-12-{n:02d}" for n in range(20, 32)) if is_kept(f"daily:{d}", "2027-01-04", "2027-W01")]
    kept += [d for d in ("2027-01-01", "2027-01-04") if is_kept(f"daily:{d}", "2027-01-04", "2027-W01")]
    assert kept == [f"2026-12-{n:02d}" for n in range(28, 32)] + ["2027-01-01", "2027-01-04"]
    assert kept_daily("2027-01-04") == "2026-12-28" and kept_daily("2024-03-01") == "2024-02-23"
    assert kept_weekly("2027-W01") == "2026-W53" and kept_weekly("2026-W53") == "2026-W52"
    assert kept_weekly("2025-W01") == "2024-W52" and kept_weekly("1970-W01") == "1969-W52"
    weeks = ["weekly:2026-W51", "weekly:2026-W52", "weekly:2026-W53", "weekly:2027-W01"]
    assert [w for w in weeks if is_kept(w, "2027-01-04", "2027-W01")] == weeks[2:]
    assert is_kept("all", "2027-01-04", "2027-W01") and is_kept("best", "2027-01-04", "2027-W01")
    with pytest.raises(ValueError):
        is_kept("monthly:2027-01", "2027-01-04", "2027-W01")


def test_a_player_keeps_at_most_twelve_boards_a_game_and_never_one_the_game_keeps():
    record = None
    for i in range(40):  # one result a day for 40 days
        record = play(record, f"m{i}", 1, T + i * DAY_MS)[0]
        mine = record[BOARDS]["g1"]
        assert len(mine) <= 12
        newest_day, newest_week = day_of(T + i * DAY_MS), week_of(T + i * DAY_MS)
        game_keeps = {b for b in (f"daily:{day_of(T + j * DAY_MS)}" for j in range(i + 1))
                      if is_kept(b, newest_day, newest_week)}
        assert game_keeps <= set(mine)
    assert mine["all"][0] == 40 and mine["best"] == [1, T]


def test_standings_rebuild_what_the_entries_said():
    record, last = None, {}
    for i, (points, hours) in enumerate([(5, 0), (0, -3), (7, 30), (7, 2), (0, 50), (3, -20)]):
        record, verdict, entries = play(record, f"m{i}", points, T + hours * H, T + 60 * H)
        for game, board, score, reached_at, _ in entries:
            last[(game, board)] = (score, reached_at)
    assert {(g, b): (s, r) for g, b, s, r in standings(loaded(record))} == last


def test_record_is_json_and_works_after_a_round_trip():
    record = play(None, "m1", 5, T)[0]
    record = play(record, "m2", 0, T + H)[0]
    text = orjson.dumps(record)
    assert text.startswith(b"[%d," % (T + H + 1000))
    copy = orjson.loads(text)  # lists where the record had tuples: the same record
    assert play(copy, "m1", 5, T, T + 2 * H)[1] == Verdict.DUPLICATE
    assert play(copy, "m3", 4, T + 2 * H)[2] == play(record, "m3", 4, T + 2 * H)[2]
    assert orjson.dumps(copy) == orjson.dumps(record)


def test_single_record_round_trips_through_the_changelog_forms():
    """A first result is single; its stored form reads back to the same bytes, and a later
    piece merged into it gives the record the rules hold (the kernel's frames:
    tests/boards/test_changelog_frames.py)."""
    from rankflow import _native
    from rankflow.state.board_rules import merge_piece, rules

    noted = _native.PlayerChanges()
    event = ("g1", "m1", "p", 50, T, T + 1000, 0, b"")
    single, verdict, entries = rules(()).apply(None, event, noted)
    assert isinstance(single, bytes) and verdict == Verdict.ACCEPTED and len(entries) == 4
    frame = orjson.loads(noted.frame({"p": single}))["p"]
    assert loaded(merge_piece(None, frame)) == single and loaded(frame) == single
    record, _, _ = rules(()).apply(single, ("g1", "m2", "p", 10, T + 5, T + 2000, 1, b""), noted)
    whole = orjson.loads(noted.frame({"p": record}))["p"]  # written whole: it was single when the barrier began
    record, _, _ = rules(()).apply(record, ("g1", "m3", "p", 5, T - H, T + 3000, 2, b""), noted)
    piece = orjson.loads(noted.frame({"p": record}))["p"]
    assert isinstance(whole, list) and set(piece) == {"r", "R", "b"}
    rebuilt = merge_piece(merge_piece(merge_piece(None, frame), whole), piece)
    assert loaded(rebuilt) == record
    assert sorted(standings(loaded(rebuilt))) == sorted(standings(record))


@pytest.mark.parametrize("points, played_at", [(50, 1798884000000), (0, 1798884000000), (7, 1799020799999),
                                               (10000, 1799020800000), (3, 0)])
def test_a_packed_first_result_gives_the_list_rules_entries(points, played_at):
    """A first result is single, its entries written out apart: they must be what the
    general rules give the same result on an empty full record."""
    received_at = played_at + 2_000
    packed, verdict, entries = br.apply_result(None, "g1", "m1", "ana", points, played_at, received_at)
    empty = br.loaded([received_at, br.NONE_HELD, {}, {}])  # a full record: the general path
    listed = br.apply_result(empty, "g1", "m1", "ana", points, played_at, received_at)
    assert br.is_single(packed) and not br.is_single(listed[0]) and (verdict, entries) == listed[1:]
    assert br.unpack(packed) == br.unpack(listed[0])
