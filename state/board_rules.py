"""The score-board rules: how one valid match result changes one player's record.

The rules themselves (docs/semantics/boards.md sections 2, 3, 4 and 7 as they apply to
one player, and checks 7 and 8 of section 1, which need the player's newest receipt) run
in the Rust kernel (native/src/rules.rs, ``rankflow._native.BoardRules``): this module is
their typed boundary, the record's forms in a changelog, and the per-game pieces the
merger shares (retention, order). It is pure (no I/O, no Bytewax), so the player stage,
the game-level merger, the tests and any replay tool share one definition of what a
result means; the reference model in tests/boards_model.py is the oracle the property
tests hold the kernel to.

A player's history is folded into one small :data:`PlayerRecord` (bytes), and
:func:`apply_result` updates it with one result (in arrival order per player) and
says which board entries changed. Every entry depends only on which results were
accepted, never on their order (section 4), so the game-level merger only keeps
the newest entry per (game, board, player) and orders entries by :func:`rank_key`.
Retention per game (section 7) is the merger's, with :func:`is_kept`: a game's
newest periods D and W are the greatest ``daily:`` and ``weekly:`` boards among the
entries it has received, since a player's first result on a board always gives an
entry (``new``), whatever its points.
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypedDict

from rankflow import _native

DAY_MS = 86_400_000  # check 7 and the identity window: 24 h of the player's receipts
FUTURE_MS = 60_000  # check 8: a result may be played at most 60 s after its receipt
KEPT_DAYS = 7  # section 7: D and the 7 calendar days before it; W and the week before it

ALL = "all"
BEST = "best"
DAILY = "daily:"  # + "YYYY-MM-DD"
WEEKLY = "weekly:"  # + "YYYY-Www"
SEASON = "season:"  # + a season's name (``state.seasons``)
FINAL = "final:"  # + a dropped period's board name: its final standings (section 9)

Span = tuple[str, int, int]
"""A season as the rules take it: ``(board, start, end)`` (``state.seasons.Season``), played_at in [start, end)."""


class Verdict:
    """What a result did: one of these strings. The last three are dead letters.

    Plain interned strings rather than an Enum (as :class:`rankflow.state.rules.Verdict`):
    the player stage tallies one per event.
    """

    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"  # same identity, points and played_at: counted, not a dead letter
    TOO_OLD = "too_old"  # check 7
    IN_FUTURE = "in_future"  # check 8
    CONFLICT = "conflict"  # same identity, other points or played_at: the first one stays

    ALL = (ACCEPTED, DUPLICATE, TOO_OLD, IN_FUTURE, CONFLICT)
    DEAD = frozenset((TOO_OLD, IN_FUTURE, CONFLICT))


DETAILS = {
    Verdict.TOO_OLD: "played more than 24 h before the newest receipt of this player (played_at < R - 86400000)",
    Verdict.IN_FUTURE: "played more than 60 s after it was received (played_at > received_at + 60000)",
    Verdict.CONFLICT: "a result with this game_id, match_id and player_id but other points or played_at"
                      " was accepted first; it stays",
}
"""A readable dead-letter detail per dead verdict."""


PlayerRecord = bytes | _native.Record
"""One player's state, as the kernel holds it (native/src/rules.rs): a player's one accepted
first result is a *single* record, ``bytes`` of about 60 B (most players of a big board);
after a second event it is a held ``_native.Record``, which the rules change in place.
Its list form (:func:`unpack`, what a changelog stores) says what it holds:

``[R, oldest, results, boards]`` where

- ``R`` (int): the newest ``received_at`` among the player's events that passed
  checks 1 to 6 (check 7's R), whatever their verdict;
- ``oldest`` (int): when to scan ``results`` for results to drop: the least ``played_at``
  among the first result of each game after the last scan, or of any result added since
  (:data:`NONE_HELD` when it is empty);
- ``results``: ``{game_id: {match_id: (points, played_at)}}`` (a list once read back
  from JSON), the accepted results that may still be inside the identity window
  (``played_at >= R - 86400000``, section 2): one that left it is ignored, and dropped
  within :data:`FORGET_SLACK_MS`;
- ``boards``: ``{game_id: {board: aggregate}}``, what each of the player's boards
  needs to be updated in any order:

  - ``all``, ``daily:YYYY-MM-DD``, ``weekly:YYYY-Www``, ``season:NAME``: ``[score, last,
    first]``: the sum of points, the greatest ``played_at`` among results with points > 0
    (-1 while there is none) and the least ``played_at`` of all;
  - ``best``: ``[best, first]``: the best points and the least ``played_at`` among
    results with those points.

A player keeps at most 12 boards a game besides its seasons (all, best, 8 days, 2 weeks:
section 7 drops its older periods); a game's results are held in arrival order with an
index by match, so a heavy player's result costs what a light one's does. Example, after
one result::

    [1798884002000, 1798884000000, {"g1": {"m1": [50, 1798884000000]}},
     {"g1": {"all": [50, 1798884000000, 1798884000000], "best": [50, 1798884000000],
             "daily:2027-01-02": [50, 1798884000000, 1798884000000],
             "weekly:2026-W53": [50, 1798884000000, 1798884000000]}}]
"""

ListRecord = list[Any]
"""A record's list form (above)."""

R, OLDEST, RESULTS, BOARDS = range(4)
Results = dict[str, dict[str, Sequence[int]]]
"""A list record's ``results``: ``{game_id: {match_id: (points, played_at)}}``."""
Boards = dict[str, dict[str, list[int]]]
"""A list record's ``boards``: ``{game_id: {board: aggregate}}``."""


class Piece(TypedDict, total=False):
    """The part of a record that a barrier's changelog frame holds: R, the results accepted in
    the barrier and the aggregates of the boards they changed (written by the kernel,
    native/src/changes.rs: an active player holds a day of results, and writing the record
    whole at every barrier cost the durable flow a third of its time). A record that was new or
    single when the barrier began is written whole instead (its stored form)."""

    R: list[int]  # [R, oldest]
    r: Results
    b: Boards


NONE_HELD = 1 << 62  # OLDEST of an empty window: later than any time
FORGET_SLACK_MS = DAY_MS // 4
"""How long a result out of the identity window may stay in the record before it is
dropped (the kernel's rule, here for the tests): one scan of a player's results per 6 h
of its receipts rather than one per event for a player whose results arrive in order."""

Entry = tuple[str, str, int, int, bool]
"""``(game_id, board, score, reached_at, new)``: a player's changed standing on one
board; ``new`` when the player was not on it before."""


# -- periods (section 3) ---------------------------------------------------------

_EPOCH_ORDINAL = datetime.date(1970, 1, 1).toordinal()


def _periods(day: int) -> tuple[str, str]:
    """The daily and weekly board of a day number (``played_at // DAY_MS``): the names the
    kernel gives a result's periods, for the tests and the merger's retention."""
    date = datetime.date.fromordinal(_EPOCH_ORDINAL + day)
    year, week, _ = date.isocalendar()
    return f"{DAILY}{date.isoformat()}", f"{WEEKLY}{year:04d}-W{week:02d}"


def day_of(played_at: int) -> str:
    """The UTC date of a time in ms: the period of its ``daily:`` board.

    >>> day_of(0), day_of(1799020799999), day_of(253402300799999)
    ('1970-01-01', '2027-01-03', '9999-12-31')
    """
    return _periods(played_at // DAY_MS)[0][len(DAILY):]


def week_of(played_at: int) -> str:
    """The ISO 8601 week (UTC) of a time in ms, named by its week-numbering year.

    >>> week_of(1799020799999), week_of(1799020800000)  # 2027-01-03 23:59:59.999, 2027-01-04
    ('2026-W53', '2027-W01')
    >>> week_of(0), week_of(253402300799999)
    ('1970-W01', '9999-W52')
    """
    return _periods(played_at // DAY_MS)[1][len(WEEKLY):]


# -- retention (section 7) -------------------------------------------------------

@functools.lru_cache(maxsize=1024)
def kept_daily(newest: str) -> str:
    """The oldest date kept when the game's newest daily period is ``newest`` (D - 7 days).

    >>> kept_daily("2027-01-04")
    '2026-12-28'
    """
    return (datetime.date.fromisoformat(newest) - datetime.timedelta(days=KEPT_DAYS)).isoformat()


@functools.lru_cache(maxsize=1024)
def kept_weekly(newest: str) -> str:
    """The oldest week kept when the game's newest weekly period is ``newest`` (the week before it).

    >>> kept_weekly("2027-W01"), kept_weekly("2026-W01")
    ('2026-W53', '2025-W52')
    """
    year, week = int(newest[:4]), int(newest[6:])
    monday = datetime.date.fromisocalendar(year, week, 1) - datetime.timedelta(days=KEPT_DAYS)
    y, w, _ = monday.isocalendar()
    return f"{y:04d}-W{w:02d}"


def is_kept(board: str, newest_daily: str | None, newest_weekly: str | None,
            season_ends: Mapping[str, str] | None = None) -> bool:
    """Whether a game keeps ``board`` while its newest periods (the aliases) are these.

    Period names of both kinds sort as text in time order (four-digit years), so the
    check is one string comparison. ``all`` and ``best`` are always kept.

    >>> [is_kept(b, "2027-01-04", "2027-W01") for b in ("daily:2026-12-28", "daily:2026-12-27", "best")]
    [True, False, True]
    >>> is_kept("weekly:2026-W53", "2027-01-04", "2027-W01"), is_kept("weekly:2026-W52", "2027-01-04", "2027-W01")
    (True, False)
    >>> [is_kept("season:s", d, None, {"season:s": "2026-12-28"}) for d in ("2027-01-04", "2027-01-05")]
    [True, False]
    """
    if board.startswith(DAILY):
        return newest_daily is None or board[len(DAILY):] >= kept_daily(newest_daily)
    if board.startswith(WEEKLY):
        return newest_weekly is None or board[len(WEEKLY):] >= kept_weekly(newest_weekly)
    if board == ALL or board == BEST:
        return True
    if board.startswith(SEASON) and season_ends is not None:  # kept as its last day's daily period would be
        return newest_daily is None or season_ends[board] >= kept_daily(newest_daily)
    raise ValueError(f"not a board name: {board!r}")


# -- one result (sections 1 checks 7-8, 2, 3, 4, 7 and 9): the kernel ----------------------

@functools.lru_cache(maxsize=64)
def rules(seasons: tuple[Span, ...] = ()) -> _native.BoardRules:
    """The kernel's rules under a run's seasons (``state.seasons.Season`` tuples), made once."""
    return _native.BoardRules([(board, start, end) for board, start, end in seasons])


def apply_result(record: PlayerRecord | None, game: str, match: str, player: str, points: int,
                 played_at: int, received_at: int, seasons: Sequence[Span] = (),
                 group: str | None = None) -> tuple[PlayerRecord, str, tuple[Entry, ...]]:
    """The player's record after one result that passed checks 1 to 6, what it did, and the entries it changed.

    ``record`` is None for a player's first event; a held record is changed in place and
    comes back, a single one gives a new held one. R takes this event's ``received_at``
    whatever the verdict (check 7's R counts every event that passed checks 1 to 6, and is
    taken *before* check 7), the rest changes only when the verdict is ``accepted``. ``seasons``: the run's seasons (section 9),
    whose boards a result played inside them enters too. ``group``: the game key of the result's
    group boards (section 10, ``GAME@FIELD=VALUE``), whose boards an accepted result enters as a
    game of their own; identity (section 2) stays the game's. ``player`` is the record's owner;
    the rules do not need it (every entry is this player's), it is there so a call reads
    like the result. A verdict other than ``accepted`` changes no board. The flow calls
    :func:`rules` ``(seasons).apply`` directly, with the result as the parse kernel made it
    (``state.score_events.ScoreEvent``, a ninth field in a grouped run).

    >>> rec, verdict, entries = apply_result(None, "g1", "m1", "ana", 50, 1798884000000, 1798884002000)
    >>> verdict, entries[:2]
    ('accepted', (('g1', 'all', 50, 1798884000000, True), ('g1', 'best', 50, 1798884000000, True)))
    >>> [e[1] for e in entries[2:]]
    ['daily:2027-01-02', 'weekly:2026-W53']
    >>> apply_result(rec, "g1", "m1", "ana", 50, 1798884000000, 1798884009000)[1:]
    ('duplicate', ())
    >>> apply_result(rec, "g1", "m1", "ana", 80, 1798884000000, 1798884040000)[1:]
    ('conflict', ())
    """
    return rules(tuple(seasons)).apply(record, (game, match, player, points, played_at, received_at, 0, b"", group))


# -- a record's forms ------------------------------------------------------------------

PACKED = "packed"
"""The tag of a single record in a changelog: ``[PACKED, R, game, match, points, played_at]``."""


def is_single(record: PlayerRecord) -> bool:
    """Whether a record is single (bytes), not held."""
    return record.__class__ is bytes


def unpack(record: PlayerRecord) -> ListRecord:
    """The list form of a record (:data:`PlayerRecord`).

    >>> rec = apply_result(None, "g1", "m1", "ana", 50, 1798884000000, 1798884002000)[0]
    >>> unpack(rec)[:3]
    [1798884002000, 1798884000000, {'g1': {'m1': (50, 1798884000000)}}]
    """
    return _native.record_unpack(record)


def pack(newest: int, game: str, match: str, points: int, played_at: int) -> PlayerRecord:
    """A single record from its fields (a changelog's :data:`PACKED` form read back)."""
    return _native.record_single(newest, game, match, points, played_at)


def stored(record: PlayerRecord) -> Any:
    """A record as a changelog or snapshot stores it (JSON-ready): a single one as
    ``[PACKED, R, game, match, points, played_at]``, a held one in its list form."""
    fields = _native.record_fields(record)
    if fields is not None:
        return [PACKED, *fields]
    return _native.record_unpack(record)


# -- order (section 4) -----------------------------------------------------------

def standings(record: PlayerRecord) -> list[tuple[str, str, int, int]]:
    """Every ``(game_id, board, score, reached_at)`` of a record: to rebuild boards from records.

    >>> rec = apply_result(None, "g1", "m1", "ana", 0, 1798884000000, 1798884002000)[0]
    >>> sorted(standings(rec))[:2]
    [('g1', 'all', 0, 1798884000000), ('g1', 'best', 0, 1798884000000)]
    """
    return _native.record_standings(record)


def rank_key(score: int, reached_at: int, player_id: str) -> tuple[int, int, str]:
    """A key whose ascending order is section 4's: score descending, reached_at, player_id.

    Python compares strings by code point, which is UTF-8 byte order.

    >>> sorted([("bo", 50, 9), ("ana", 50, 3), ("cy", 60, 9), ("dee", 50, 3)], key=lambda e: rank_key(e[1], e[2], e[0]))
    [('cy', 60, 9), ('ana', 50, 3), ('dee', 50, 3), ('bo', 50, 9)]
    """
    return -score, reached_at, player_id


def newest_periods(boards: Iterable[str]) -> tuple[str | None, str | None]:
    """A game's newest daily and weekly period among ``boards`` (board names): its
    aliases ``daily`` and ``weekly`` (section 3), None while it has none of a kind.

    >>> newest_periods(["all", "daily:2027-01-03", "daily:2027-01-04", "weekly:2026-W53", "best"])
    ('2027-01-04', '2026-W53')
    >>> newest_periods(["all"])
    (None, None)
    """
    daily = weekly = None
    for board in boards:
        if board.startswith(DAILY):
            period = board[len(DAILY):]
            if daily is None or period > daily:
                daily = period
        elif board.startswith(WEEKLY):
            period = board[len(WEEKLY):]
            if weekly is None or period > weekly:
                weekly = period
    return daily, weekly


# -- records in a changelog ----------------------------------------------------------

def merge_piece(record: ListRecord | None, piece: Piece | ListRecord) -> ListRecord:
    """A record read back from a changelog, in its stored form: ``piece`` (:class:`Piece`,
    or a whole record) folded into what was read before it; :func:`loaded` makes the
    kernel's record of the result. Results and boards a live record dropped stay in the
    pieces; :func:`forget_expired` drops the results again, and the boards are dropped as
    the live record drops them (they can get no result: section 7).

    >>> rec = merge_piece(None, {"R": [10, 5], "r": {"g": {"m": [1, 5]}}})
    >>> merge_piece(rec, {"R": [20, 5], "b": {"g": {"best": [1, 5]}}})
    [20, 5, {'g': {'m': [1, 5]}}, {'g': {'best': [1, 5]}}]
    """
    if isinstance(piece, list):
        return piece
    if record is None:
        record = [0, NONE_HELD, {}, {}]
    elif record[0] == PACKED:
        record = unpack(loaded(record))
    record[R], record[OLDEST] = piece["R"]
    for game, matches in piece.get("r", {}).items():
        record[RESULTS].setdefault(game, {}).update(matches)
    for game, aggregates in piece.get("b", {}).items():
        record[BOARDS].setdefault(game, {}).update(aggregates)
    return record


def loaded(record: Any) -> PlayerRecord:
    """The kernel's record of a stored form (:func:`stored`, :func:`merge_piece`)."""
    if isinstance(record, bytes):
        return record
    if record and record[0] == PACKED:
        return pack(*record[1:])
    return _native.record_pack(record)


def forget_expired(record: PlayerRecord) -> PlayerRecord:
    """The record with the results out of the identity window dropped now (section 2), not
    lazily (a single record holds one result, accepted at its R: inside the window)."""
    if not is_single(record):
        record.forget_expired()  # type: ignore[union-attr]
    return record
