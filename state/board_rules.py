"""The score-board rules: how one valid match result changes one player's record.

This module is docs/semantics/boards.md sections 2, 3, 4 and 7 as they apply to one player, and
check 7 and 8 of section 1 (they need the player's newest receipt). It is pure (no
I/O, no Bytewax), so the player stage, the game-level merger, the tests and any
replay tool share one definition of what a result means.

A player's history is folded into one small :data:`PlayerRecord`, and
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
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypedDict

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


PlayerRecord = list[Any]
"""One player's state, kept as JSON-ready plain containers (orjson writes it to a
changelog as is; read back, its lists and dicts work unchanged):

``[R, oldest, results, boards]`` where

- ``R`` (int): the newest ``received_at`` among the player's events that passed
  checks 1 to 6 (check 7's R), whatever their verdict;
- ``oldest`` (int): when to scan ``results`` for results to drop: the least ``played_at``
  among the first result of each game's dict after the last scan, or of any result
  added since (:data:`NONE_HELD` when it is empty; see :func:`_forget`);
- ``results``: ``{game_id: {match_id: (points, played_at)}}`` (the pair is a list once
  read back from JSON), the accepted results
  that may still be inside the identity window (``played_at >= R - 86400000``,
  section 2): one that left it is ignored, and dropped within :data:`FORGET_SLACK_MS`;
- ``boards``: ``{game_id: {board: aggregate}}``, what each of the player's boards
  needs to be updated in any order:

  - ``all``, ``daily:YYYY-MM-DD``, ``weekly:YYYY-Www``: ``[score, last, first]``: the
    sum of points, the greatest ``played_at`` among results with points > 0 (-1 while
    there is none) and the least ``played_at`` of all;
  - ``best``: ``[best, first]``: the best points and the least ``played_at`` among
    results with those points.

:func:`apply_result` updates a record in place. Example, after one result::

    [1798884002000, 1798884000000, {"g1": {"m1": [50, 1798884000000]}},
     {"g1": {"all": [50, 1798884000000, 1798884000000], "best": [50, 1798884000000],
             "daily:2027-01-02": [50, 1798884000000, 1798884000000],
             "weekly:2026-W53": [50, 1798884000000, 1798884000000]}}]
"""

R, OLDEST, RESULTS, BOARDS = range(4)
Results = dict[str, dict[str, Sequence[int]]]
"""A record's ``results``: ``{game_id: {match_id: (points, played_at)}}``."""
Aggregates = dict[str, list[int]]
"""One game's boards of a player: ``{board: aggregate}``."""
Boards = dict[str, Aggregates]
"""A record's ``boards``: ``{game_id: {board: aggregate}}``."""


class Piece(TypedDict, total=False):
    """The part of a record that a barrier's changelog frame holds (:func:`note_piece`)."""

    R: list[int]  # [R, oldest]
    r: Results
    b: Boards
    W: int  # 1: the record was packed when the barrier began; the frame holds it whole


NONE_HELD = 1 << 62  # OLDEST of an empty window: later than any time
FORGET_SLACK_MS = DAY_MS // 4
"""How long a result out of the identity window may stay in the record before it is
dropped: one scan of a player's results per 6 h of its receipts rather than one per
event for a player whose results arrive in order (each one would leave the window
just after the last scan)."""

Entry = tuple[str, str, int, int, bool]
"""``(game_id, board, score, reached_at, new)``: a player's changed standing on one
board; ``new`` when the player was not on it before."""


# -- periods (section 3) ---------------------------------------------------------

_EPOCH_ORDINAL = datetime.date(1970, 1, 1).toordinal()
_PERIODS: dict[int, tuple[str, str]] = {}  # day number -> (daily board, weekly board)
_PERIODS_MAX = 4096  # distinct days cached; a log spanning more starts the cache afresh


def _periods(day: int) -> tuple[str, str]:
    """The daily and weekly board of a day number (``played_at // DAY_MS``), cached.

    A result's periods are looked up once per event; dates change once a day, so a
    small cache turns the calendar arithmetic into one dict lookup.
    """
    names = _PERIODS.get(day)
    if names is None:
        date = datetime.date.fromordinal(_EPOCH_ORDINAL + day)
        year, week, _ = date.isocalendar()
        names = (f"{DAILY}{date.isoformat()}", f"{WEEKLY}{year:04d}-W{week:02d}")
        if len(_PERIODS) >= _PERIODS_MAX:
            _PERIODS.clear()
        _PERIODS[day] = names
    return names


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


_MOST_BOARDS = 2 + (KEPT_DAYS + 1) + 2
"""A player's boards in one game that can all still be kept: all, best, 8 days, 2 weeks."""


def _drop_old_periods(boards: Aggregates, prefix: str, oldest_kept: Callable[[str], str]) -> None:
    """Section 7 for one player: drop its own periods of one kind the game no longer keeps.

    The cut is taken from the player's newest period of that kind, which is at most
    the game's newest (the game's comes from all its players' results), so anything
    dropped here is older than what the game keeps too: the player never loses a
    board the game still shows. And no later result of this player can fall in a
    dropped period: it must be played at most 24 h before R, while the player's
    newest period holds a result played at most 60 s after R.

    Called only when the player holds more boards in a game than can all be kept
    (:data:`_MOST_BOARDS`): then one is surely droppable, and the scan is paid once
    per dropped board rather than once per new one. A player's state in a game so
    stays within 12 boards.
    """
    periods = [b for b in boards if b.startswith(prefix)]
    cut = prefix + oldest_kept(max(periods)[len(prefix):])
    for board in periods:
        if board < cut:
            del boards[board]


# -- one result (sections 1 checks 7-8, 2, 3, 4) --------------------------------

def apply_result(record: PlayerRecord | bytes | None, game: str, match: str, player: str, points: int,
                 played_at: int, received_at: int, seasons: Sequence[Span] = (),
                 group: str | None = None) -> tuple[PlayerRecord | bytes, str, tuple[Entry, ...]]:
    """The player's record after one result that passed checks 1 to 6, what it did, and the entries it changed.

    ``record`` is updated in place (a new one is made for a player's first event):
    R takes this event's ``received_at`` whatever the verdict (check 7's R counts
    every event that passed checks 1 to 6, and is taken *before* check 7), the rest
    changes only when the verdict is ``accepted``. ``seasons``: the run's seasons (section 9),
    whose boards a result played inside them enters too. ``group``: the game key of the result's
    group boards (section 10, ``GAME@FIELD=VALUE``), whose boards an accepted result enters as a
    game of their own; identity (section 2) stays the game's. ``player`` is the record's owner;
    the rules do not need it (every entry is this player's), it is there so a call
    reads like the result. A verdict other than ``accepted`` changes no board.

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
    if record is None:
        if played_at < received_at - DAY_MS or played_at > received_at + FUTURE_MS:  # 7, 8
            return ([received_at, NONE_HELD, {}, {}],
                    Verdict.TOO_OLD if played_at < received_at - DAY_MS else Verdict.IN_FUTURE, ())
        if group is None and (not seasons or not _in_season(seasons, played_at)):
            return _first_result(game, match, points, played_at, received_at)
        record = [received_at, NONE_HELD, {}, {}]  # in a season or a group: the list form (a packed one holds neither)
    if isinstance(record, bytes):  # a second event: the list form from here on
        record = unpack(record)
    newest = record[R]
    if received_at > newest:  # R moves before check 7, even for an event then rejected
        record[R] = newest = received_at
        if record[OLDEST] < newest - DAY_MS - FORGET_SLACK_MS:
            record[OLDEST] = _forget(record[RESULTS], newest - DAY_MS)
    if played_at < newest - DAY_MS:  # 7
        return record, Verdict.TOO_OLD, ()
    if played_at > received_at + FUTURE_MS:  # 8
        return record, Verdict.IN_FUTURE, ()
    matches = record[RESULTS].get(game)
    if matches is None:
        matches = record[RESULTS][game] = {}
    else:
        seen = matches.get(match)  # 2: identity (game, match, player), within the window
        if seen is not None and seen[1] >= newest - DAY_MS:
            if seen[0] == points and seen[1] == played_at:
                return record, Verdict.DUPLICATE, ()
            return record, Verdict.CONFLICT, ()
    matches[match] = (points, played_at)  # replaces a result that left the window, if any
    if played_at < record[OLDEST]:
        record[OLDEST] = played_at
    if group is not None:
        return record, Verdict.ACCEPTED, (_enter(record[BOARDS], game, points, played_at, seasons)
                                          + _enter(record[BOARDS], group, points, played_at, seasons))
    return record, Verdict.ACCEPTED, _enter(record[BOARDS], game, points, played_at, seasons)


def _in_season(seasons: Sequence[Span], played_at: int) -> bool:
    return any(start <= played_at < end for _, start, end in seasons)


# -- a player's first result, packed ---------------------------------------------

_HEAD = struct.Struct("<qqHH")  # R, played_at, points, the game id's length in UTF-8 bytes
PACKED = "packed"
"""The tag of a packed record in a changelog: ``[PACKED, R, game, match, points, played_at]``."""


def _first_result(game: str, match: str, points: int, played_at: int,
                  received_at: int) -> tuple[bytes, str, tuple[Entry, ...]]:
    """A player's first event, accepted: its record packed in one ``bytes`` (about 60 B
    where the lists and dicts take 1.1 kB; most players of a big board have one result).

    The packed record is what :func:`unpack` expands to the list form with the same
    rules (:func:`_enter`): the entries here are those rules' entries for a first result
    (every board new, reached_at the result's played_at), and any later event expands the
    record first, so one definition decides every verdict.
    """
    g = game.encode()
    record = _HEAD.pack(received_at, played_at, points, len(g)) + g + match.encode()
    daily, weekly = _periods(played_at // DAY_MS)
    return record, Verdict.ACCEPTED, ((game, ALL, points, played_at, True), (game, BEST, points, played_at, True),
                                      (game, daily, points, played_at, True), (game, weekly, points, played_at, True))


def _fields(packed: bytes) -> tuple[int, str, str, int, int]:
    """``(R, game, match, points, played_at)`` of a packed record."""
    newest, played_at, points, size = _HEAD.unpack_from(packed)
    start = _HEAD.size
    return newest, packed[start:start + size].decode(), packed[start + size:].decode(), points, played_at


def unpack(packed: bytes) -> PlayerRecord:
    """The list form of a packed record: what :func:`apply_result` makes of the same first result.

    >>> rec = apply_result(None, "g1", "m1", "ana", 50, 1798884000000, 1798884002000)[0]
    >>> unpack(rec) == apply_result([1798884002000, NONE_HELD, {}, {}], "g1", "m1", "ana", 50, 1798884000000, 1798884002000)[0]
    True
    """
    newest, game, match, points, played_at = _fields(packed)
    record: PlayerRecord = [newest, played_at, {game: {match: (points, played_at)}}, {}]
    _enter(record[BOARDS], game, points, played_at)
    return record


def pack(newest: int, game: str, match: str, points: int, played_at: int) -> bytes:
    """A packed record from its fields (a changelog's :data:`PACKED` form read back)."""
    g = game.encode()
    return _HEAD.pack(newest, played_at, points, len(g)) + g + match.encode()


def stored(record: PlayerRecord | bytes) -> Any:
    """A record as a changelog or snapshot stores it (JSON-ready): a packed one as
    ``[PACKED, R, game, match, points, played_at]``, a list one as it is."""
    if isinstance(record, bytes):
        return [PACKED, *_fields(record)]
    return record


def _forget(results: Results, cut: int) -> int:
    """Section 2: results played before ``cut`` (R - 24 h) no longer count for identity; drop them.

    R only grows, so a result out of the window is out for good: dropping it changes
    no verdict (the identity check looks at the window anyway), only the record's
    size. Results arrive mostly in the order they were played, and a game's dict
    keeps arrival order, so the scan drops the leading results that left the window
    and stops at the first one inside it: a heavy player's day of results is not
    read every time (it was 1.8 of the rules' 6 µs per result). A result that
    arrived late, behind newer ones, is dropped once those before it are. Returns
    the new OLDEST: the least ``played_at`` among the results the scan stopped at.
    """
    oldest = NONE_HELD
    for game in list(results):
        matches = results[game]
        stale: list[str] = []
        for match, result in matches.items():
            if result[1] >= cut:
                if result[1] < oldest:
                    oldest = result[1]
                break
            stale.append(match)
        for match in stale:
            del matches[match]
        if not matches:
            del results[game]
    return oldest


def _enter(boards: Boards, game: str, points: int, played_at: int, seasons: Sequence[Span] = ()) -> tuple[Entry, ...]:
    """Section 3: an accepted result enters ``all``, ``best``, its day's and week's boards, and
    (section 9) the board of each season it was played in. A player keeps a season's aggregate
    for as long as the record lives: seasons are few (``state.seasons.MAX_SEASONS``)."""
    mine = boards.get(game)
    if mine is None:
        mine = boards[game] = {}
    daily, weekly = _periods(played_at // DAY_MS)
    out: list[Entry] = []
    _add_to_sum(mine, game, ALL, points, played_at, out)
    _raise_best(mine, game, points, played_at, out)
    if (_add_to_sum(mine, game, daily, points, played_at, out)
            + _add_to_sum(mine, game, weekly, points, played_at, out)) and len(mine) > _MOST_BOARDS:
        _drop_old_periods(mine, DAILY, kept_daily)
        _drop_old_periods(mine, WEEKLY, kept_weekly)
    if seasons:
        for board, start, end in seasons:
            if start <= played_at < end:
                _add_to_sum(mine, game, board, points, played_at, out)
    return tuple(out)


def _add_to_sum(mine: Aggregates, game: str, board: str, points: int, played_at: int, out: list[Entry]) -> bool:
    """Section 4 on a sum board: reached_at is the last positive result, or the first while the score is 0.

    Appends the entry if the score or reached_at changed; True when the board is new
    to the player.
    """
    agg = mine.get(board)
    if agg is None:
        mine[board] = [points, played_at if points else -1, played_at]
        out.append((game, board, points, played_at, True))
        return True
    score, last, first = agg
    earlier = played_at < first
    if earlier:
        agg[2] = played_at
    if points:
        agg[0] = score = score + points
        if played_at > last:
            agg[1] = last = played_at
        out.append((game, board, score, last, False))
    elif earlier and not score:  # a 0 on a 0 score: the player joined the board earlier
        out.append((game, board, 0, played_at, False))
    return False


def _raise_best(mine: Aggregates, game: str, points: int, played_at: int, out: list[Entry]) -> None:
    """Section 4 on ``best``: only a strictly greater result raises it; an equal one can only make it earlier."""
    agg = mine.get(BEST)
    if agg is None:
        mine[BEST] = [points, played_at]
        out.append((game, BEST, points, played_at, True))
    elif points > agg[0] or (points == agg[0] and played_at < agg[1]):
        agg[0], agg[1] = points, played_at
        out.append((game, BEST, points, played_at, False))


# -- order (section 4) -----------------------------------------------------------

def standing(board: str, aggregate: Sequence[int]) -> tuple[int, int]:
    """``(score, reached_at)`` of a player on ``board`` from its aggregate in the record.

    >>> standing("all", [0, -1, 7]), standing("all", [20, 9, 7]), standing("best", [50, 3])
    ((0, 7), (20, 9), (50, 3))
    """
    if board == BEST:
        return aggregate[0], aggregate[1]
    score, last, first = aggregate
    return score, last if score else first


def standings(record: PlayerRecord | bytes) -> Iterator[tuple[str, str, int, int]]:
    """Every ``(game_id, board, score, reached_at)`` of a record: to rebuild boards from records.

    >>> rec = apply_result(None, "g1", "m1", "ana", 0, 1798884000000, 1798884002000)[0]
    >>> sorted(standings(rec))[:2]
    [('g1', 'all', 0, 1798884000000), ('g1', 'best', 0, 1798884000000)]
    """
    if isinstance(record, bytes):
        record = unpack(record)
    for game, mine in record[BOARDS].items():
        for board, aggregate in mine.items():
            yield (game, board, *standing(board, aggregate))


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

def note_piece(piece: Piece, record: PlayerRecord | bytes, game: str, match: str, changes: tuple[Entry, ...]) -> None:
    """Add an accepted result to ``piece``: the part of the player's record that a barrier's
    changelog frame holds (an active player holds a day of results: writing the record
    whole at every barrier cost the durable flow a third of its time). The piece holds
    the result and the aggregates of the boards it changed, the record's own lists, so
    the frame written at the barrier (:func:`finish_piece`) has their values then.
    O(boards changed).

    >>> rec, _, changes = apply_result(None, "g1", "m1", "ana", 50, 1798884000000, 1798884002000)
    >>> piece: Piece = {}
    >>> note_piece(piece, rec, "g1", "m1", changes)  # a first result is packed: written whole
    >>> finish_piece(piece, rec)
    ['packed', 1798884002000, 'g1', 'm1', 50, 1798884000000]
    >>> rec, _, changes = apply_result(rec, "g1", "m2", "ana", 70, 1798884005000, 1798884006000)
    >>> piece = {}
    >>> note_piece(piece, rec, "g1", "m2", changes[1:2])
    >>> finish_piece(piece, rec)
    {'r': {'g1': {'m2': (70, 1798884005000)}}, 'b': {'g1': {'best': [70, 1798884005000]}}, 'R': [1798884006000, 1798884000000]}
    """
    if isinstance(record, bytes):  # packed: the barrier writes it whole (finish_piece)
        return
    if not piece:  # the player's first accepted result of the barrier: both parts start here
        piece["r"], piece["b"] = {}, {}
    results, boards = piece["r"], piece["b"]
    mine = results.get(game)
    if mine is None:
        mine = results[game] = {}
    mine[match] = record[RESULTS][game][match]
    noted = boards.get(game)
    if noted is None:
        noted = boards[game] = {}
    held = record[BOARDS][game]
    for change in changes:
        if change[0] is not game and change[0] != game:  # a group's board (section 10): its own game key
            boards.setdefault(change[0], {})[change[1]] = record[BOARDS][change[0]][change[1]]
            continue
        noted[change[1]] = held[change[1]]


def finish_piece(piece: Piece, record: PlayerRecord | bytes) -> Piece:
    """The changelog frame's piece of a record that changed since the last barrier: R (it
    moves with every result, whatever the verdict) and what :func:`note_piece` noted;
    the whole record when it is packed, or was packed at the start of the barrier
    (``piece["W"]``: the earlier frames may not hold it)."""
    if isinstance(record, bytes):
        return stored(record)  # type: ignore[no-any-return]
    if "W" in piece:
        return record  # type: ignore[return-value]
    piece["R"] = [record[R], record[OLDEST]]
    return piece


def merge_piece(record: PlayerRecord | bytes | None, piece: Piece | PlayerRecord) -> PlayerRecord | bytes:
    """A record read back from a changelog: ``piece`` (:func:`finish_piece`, or a whole
    record) folded into what was read before it. Results and boards a live record
    dropped stay in the pieces; :func:`forget_expired` drops the results again, and the
    boards are dropped as the live record drops them (they can get no result: section 7).

    >>> rec = merge_piece(None, {"R": [10, 5], "r": {"g": {"m": [1, 5]}}})
    >>> merge_piece(rec, {"R": [20, 5], "b": {"g": {"best": [1, 5]}}})
    [20, 5, {'g': {'m': [1, 5]}}, {'g': {'best': [1, 5]}}]
    """
    if isinstance(piece, list):
        return loaded(piece)  # type: ignore[no-any-return]
    if record is None:
        record = [0, NONE_HELD, {}, {}]
    elif isinstance(record, bytes):
        record = unpack(record)
    record[R], record[OLDEST] = piece["R"]
    for game, matches in piece.get("r", {}).items():
        record[RESULTS].setdefault(game, {}).update(matches)
    for game, aggregates in piece.get("b", {}).items():
        record[BOARDS].setdefault(game, {}).update(aggregates)
    return record


def loaded(record: Any) -> Any:
    """A record as :func:`stored` wrote it, in the form the rules hold it."""
    if record and record[0] == PACKED:
        return pack(*record[1:])
    return record


def forget_expired(record: PlayerRecord | bytes) -> None:
    """Drop the results out of the identity window now (section 2), not lazily (a packed
    record holds one result, accepted at its R: inside the window)."""
    if isinstance(record, bytes):
        return
    record[OLDEST] = _forget(record[RESULTS], record[R] - DAY_MS)
