"""A small reference model of docs/semantics/boards.md, written independently of the flow's rules.

It reads events one at a time with the standard library (``json``, ``datetime``,
``hmac``), keeps every accepted result for good, and computes every board from
scratch when asked: the most direct reading of the contract, with no record,
aggregate, cache or batching. ``rankflow.state`` must produce exactly what this
produces; nothing here imports it.
"""

from __future__ import annotations

import datetime
import decimal
import fractions
import hashlib
import hmac
import json
import re
from typing import Any

DAY = 86_400_000
LAST_MS = 253402300799999
IDS = ("game_id", "match_id", "player_id")
INTS = ("points", "played_at", "received_at")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _any_int(text: str) -> int:
    """Integers of any size; Python refuses to convert one beyond 4300 digits, which is out of range anyway."""
    try:
        return int(text)
    except ValueError:
        return -(10**5000) if text.startswith("-") else 10**5000


def _unpaired_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, dict):
        return any(_unpaired_surrogate(k) or _unpaired_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_unpaired_surrogate(v) for v in value)
    return False


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def signature(key: bytes, game: str, match: str, player: str, points: int, played_at: int) -> str:
    """docs/semantics/boards.md section 1's ``sig``, written out from the table."""
    text = "|".join([f"{len(game.encode())}:{game}", f"{len(match.encode())}:{match}",
                     f"{len(player.encode())}:{player}", str(points), str(played_at)])
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def check(raw: bytes, key: bytes | None) -> tuple[str | None, dict | None]:
    """Checks 1 to 6: ``(reason, None)`` for the first that fails, else ``(None, event)``."""
    try:
        obj = json.loads(raw.decode("utf-8"), parse_constant=_no_constant, parse_int=_any_int)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return "invalid_json", None
    if _unpaired_surrogate(obj):
        return "invalid_json", None
    if not isinstance(obj, dict):
        return "not_an_object", None
    if any(f not in obj for f in IDS + INTS):
        return "missing_field", None
    if any(not isinstance(obj[f], str) for f in IDS) or any(not _is_int(obj[f]) for f in INTS):
        return "wrong_type", None
    if (any(not 1 <= len(obj[f]) <= 64 for f in IDS) or not 0 <= obj["points"] <= 10000
            or any(not 0 <= obj[f] <= LAST_MS for f in ("played_at", "received_at"))):
        return "out_of_range", None
    if key is not None:
        sig = obj.get("sig")
        expected = signature(key, *(obj[f] for f in IDS), obj["points"], obj["played_at"])
        if not isinstance(sig, str) or not hmac.compare_digest(sig.encode(), expected.encode()):
            return "bad_signature", None
    return None, obj


def date_of(ms: int) -> datetime.date:
    return (datetime.datetime(1970, 1, 1) + datetime.timedelta(milliseconds=ms)).date()


def week_name(day: datetime.date) -> str:
    year, week, _ = day.isocalendar()
    return f"{year:04d}-W{week:02d}"


def week_start(day: datetime.date) -> datetime.date:
    return day - datetime.timedelta(days=day.weekday())


class BoardsModel:
    """Feed events in log order (per partition), then read the boards."""

    def __init__(self, key: bytes | None, seasons: dict[str, tuple[int, int]] | None = None,
                 group_by: str | None = None) -> None:
        """``seasons``: name -> ``(start, end)`` in ms, the boards ``season:NAME`` of section 9;
        ``group_by``: the field whose values keep group boards (section 10), each group held as the
        game ``GAME@FIELD=VALUE`` (how Redis holds them)."""
        self.key = key
        self.seasons = seasons or {}
        self.group_by = group_by
        self.groups: dict[tuple[str, str, str, int], str] = {}  # (player, game, match, nth accepted) -> its group's game key
        self.newest_receipt: dict[str, int] = {}  # R per player
        self.accepted: dict[str, list[tuple[str, str, int, int]]] = {}  # player -> (game, match, points, played_at)
        self.dead_letters: list[tuple[str, str, int]] = []  # (reason, partition, offset)
        self.duplicates = 0
        self.outcomes: list[str] = []  # per event fed: "accepted", "duplicate" or the dead-letter reason

    def feed(self, raw: bytes, partition: str, offset: int) -> str:
        outcome = self._decide(raw)
        self.outcomes.append(outcome)
        if outcome == "duplicate":
            self.duplicates += 1
        elif outcome != "accepted":
            self.dead_letters.append((outcome, partition, offset))
        return outcome

    def _decide(self, raw: bytes) -> str:
        reason, ev = check(raw, self.key)
        if reason is not None:
            return reason
        field = self.group_by
        group = None
        if field is not None:  # section 10: checks 4 and 5 of the group field
            value = ev.get(field)
            if value is not None and not isinstance(value, str):
                return "wrong_type"
            if ((value is not None and re.fullmatch(r"[A-Za-z0-9_.-]{1,32}", value) is None)
                    or f"@{field}=" in ev["game_id"]):
                return "out_of_range"
            group = None if value is None else f"{ev['game_id']}@{field}={value}"
        player, game, match = ev["player_id"], ev["game_id"], ev["match_id"]
        points, played_at, received_at = ev["points"], ev["played_at"], ev["received_at"]
        r = max(self.newest_receipt.get(player, received_at), received_at)
        self.newest_receipt[player] = r
        if played_at < r - DAY:
            return "too_old"
        if played_at > received_at + 60000:
            return "in_future"
        mine = self.accepted.setdefault(player, [])
        for g, m, p, t in mine:
            if (g, m) == (game, match) and t >= r - DAY:  # still remembered
                return "duplicate" if (p, t) == (points, played_at) else "conflict"
        mine.append((game, match, points, played_at))
        if group is not None:
            self.groups[(player, game, match, len(mine))] = group
        return "accepted"

    def _results(self) -> dict[str, list[tuple[str, int, int]]]:
        """Per game, every accepted ``(player, points, played_at)``."""
        games: dict[str, list[tuple[str, int, int]]] = {}
        for player, results in self.accepted.items():
            for i, (game, match, points, played_at) in enumerate(results, start=1):
                games.setdefault(game, []).append((player, points, played_at))
                group = self.groups.get((player, game, match, i))
                if group is not None:  # section 10: the group's boards are a game's of their own
                    games.setdefault(group, []).append((player, points, played_at))
        return games

    def aliases(self) -> dict[str, dict[str, str]]:
        """Per game, the board names ``daily`` and ``weekly`` resolve to."""
        out = {}
        for game, results in self._results().items():
            newest = max(date_of(t) for _, _, t in results)
            newest_week = max(week_start(date_of(t)) for _, _, t in results)
            out[game] = {"daily": f"daily:{newest.isoformat()}", "weekly": f"weekly:{week_name(newest_week)}"}
        return out

    def last_day(self, name: str) -> datetime.date:
        """The last day of a period's board (section 9): its date, its week's Sunday, its season's last ms's date."""
        kind, _, period = name.partition(":")
        if kind == "daily":
            return datetime.date.fromisoformat(period)
        if kind == "weekly":
            return datetime.date.fromisocalendar(int(period[:4]), int(period[6:]), 7)
        return date_of(self.seasons[period][1] - 1)

    def periods(self) -> dict[str, dict[str, list[tuple[str, int, int]]]]:
        """Every period board with an accepted result, kept or not: ``{game: {board: entries}}``."""
        out = {}
        for game, results in self._results().items():
            scopes: dict[str, list[tuple[str, int, int]]] = {}
            for result in results:
                day = date_of(result[2])
                scopes.setdefault(f"daily:{day.isoformat()}", []).append(result)
                scopes.setdefault(f"weekly:{week_name(day)}", []).append(result)
                for name, (start, end) in self.seasons.items():
                    if start <= result[2] < end:
                        scopes.setdefault(f"season:{name}", []).append(result)
            out[game] = {name: board(name, scope) for name, scope in scopes.items()}
        return out

    def newest_day(self, game: str) -> datetime.date:
        return max(date_of(t) for _, _, t in self._results()[game])

    def dropped(self) -> dict[str, dict[str, list[tuple[str, int, int]]]]:
        """Section 9: the periods with a result that retention does not keep, with their boards now."""
        return {game: {name: entries for name, entries in boards.items()
                       if (self.newest_day(game) - self.last_day(name)).days > 7}
                for game, boards in self.periods().items()}

    def boards(self) -> dict[str, dict[str, list[tuple[str, int, int]]]]:
        """Every kept board of every game: ``[(player_id, score, reached_at), ...]`` in rank order."""
        out = {}
        for game, results in self._results().items():
            newest_day = max(date_of(t) for _, _, t in results)
            newest_week = max(week_start(date_of(t)) for _, _, t in results)
            scopes: dict[str, list[tuple[str, int, int]]] = {"all": results, "best": results}
            for result in results:
                day = date_of(result[2])
                if day >= newest_day - datetime.timedelta(days=7):
                    scopes.setdefault(f"daily:{day.isoformat()}", []).append(result)
                if week_start(day) >= newest_week - datetime.timedelta(days=7):
                    scopes.setdefault(f"weekly:{week_name(day)}", []).append(result)
                for name, (start, end) in self.seasons.items():  # section 9: kept as its last day's period
                    if start <= result[2] < end and (newest_day - date_of(end - 1)).days <= 7:
                        scopes.setdefault(f"season:{name}", []).append(result)
            out[game] = {name: board(name, scope) for name, scope in scopes.items()}
        return out


def board(name: str, results: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
    """One board from the accepted results in its scope, in section 4's order."""
    per_player: dict[str, list[tuple[int, int]]] = {}  # each player's results, in log order
    for player, points, t in results:
        per_player.setdefault(player, []).append((points, t))
    entries = []
    for player, mine in per_player.items():
        if name == "best":
            score = max(points for points, _ in mine)
            reached = min(t for points, t in mine if points == score)
        else:
            score = sum(points for points, _ in mine)
            positive = [t for points, t in mine if points > 0]
            reached = max(positive) if score > 0 else min(t for _, t in mine)
        entries.append((player, score, reached))
    return sorted(entries, key=lambda e: (-e[1], e[2], e[0].encode("utf-8")))


def rank_and_competition(entries: list[tuple[str, int, int]]) -> list[tuple[str, int, int, int]]:
    """``(player_id, score, rank, competition_rank)`` for rank-ordered entries."""
    return [(player, score, i + 1, 1 + sum(1 for e in entries if e[1] > score))
            for i, (player, score, _) in enumerate(entries)]


def around(entries: list[tuple[str, int, int]], player: str, r: int) -> list[tuple[str, int, int, int]] | None:
    """The entries ranked ``rank - r`` to ``rank + r`` (clamped), or None: not on this board."""
    if not 0 <= r <= 50:
        raise ValueError("r must be 0 to 50")
    ranked = rank_and_competition(entries)
    mine = [row for row in ranked if row[0] == player]
    if not mine:
        return None
    rank = mine[0][2]
    return [row for row in ranked if rank - r <= row[2] <= rank + r]


# -- pages, percentiles and tie styles (docs/semantics/boards.md 5.1 to 5.3) -------------------

def tie_ranks(entries: list[tuple[str, int, int]], ties: str | None) -> list[int]:
    """Each rank-ordered entry's ``rank`` in the tie style: ordinal (also without one), competition
    ("1224": 1 + the players with a greater score) or dense ("1223": 1 + the distinct greater scores)."""
    if ties == "competition":
        return [1 + sum(1 for e in entries if e[1] > score) for _, score, _ in entries]
    if ties == "dense":
        return [1 + len({e[1] for e in entries if e[1] > score}) for _, score, _ in entries]
    return list(range(1, len(entries) + 1))


def styled(entries: list[tuple[str, int, int]], ties: str | None) -> list[tuple[str, int, int]]:
    """``(player_id, score, rank)`` per entry, the rank in the tie style."""
    return [(player, score, rank) for (player, score, _), rank in zip(entries, tie_ranks(entries, ties))]


def percentile(rank: int, entries: int) -> float:
    """100 * (entries - rank) / entries, rounded half-even to two decimals (by ``decimal``)."""
    exact = decimal.Decimal(100 * (entries - rank)) / decimal.Decimal(entries)
    return float(exact.quantize(decimal.Decimal("0.01"), rounding=decimal.ROUND_HALF_EVEN))


def after(entries: list[tuple[str, int, int]], cursor: tuple[int, int, str]) -> int:
    """How many entries come before or at the cursor's place ``(score, reached_at, player_id)``:
    where the page after it starts, whether or not that entry is still there."""
    score, reached, player = cursor
    place = (-score, reached, player.encode("utf-8"))
    return sum(1 for p, s, t in entries if (-s, t, p.encode("utf-8")) <= place)


def pages(entries: list[tuple[str, int, int]], n: int) -> list[list[tuple[str, int, int]]]:
    """The board cut into pages of ``n`` entries, in order."""
    return [entries[i:i + n] for i in range(0, len(entries), n)]


def top_percent(entries: list[tuple[str, int, int]], ties: str | None, percent: fractions.Fraction,
                n: int) -> list[tuple[str, int, int]]:
    """The top ``percent`` percent, by the tie style's rank: every entry whose exact percentile
    100 * (N - rank) / N is at least 100 - percent, the first ``n`` of them."""
    total = len(entries)
    inside = [row for row in styled(entries, ties)
              if fractions.Fraction(100 * (total - row[2]), total) >= 100 - percent]
    return inside[:n]


def score_for_percentile(entries: list[tuple[str, int, int]], ties: str | None,
                         percent: fractions.Fraction) -> int | None:
    """The least score among the entries whose exact percentile (by the tie style's rank) is at least
    ``percent``; None when there is none."""
    total = len(entries)
    inside = [score for _, score, rank in styled(entries, ties)
              if fractions.Fraction(100 * (total - rank), total) >= percent]
    return min(inside) if inside else None

def scoped(entries: list[tuple[str, int, int]], players: list[str],
           ties: str | None = None) -> tuple[list[tuple[str, int, int, int, int]], list[str]]:
    """Section 5.4's ranks of a set of players: ``(player_id, score, rank, competition_rank, rank_in_set)``
    of those on the board, read down the board, and the others in the order first asked."""
    asked = set(players)
    styles = tie_ranks(entries, ties)  # ``rank`` in the tie style (section 5.3)
    on = [(player, score, styles[rank - 1], competition)
          for player, score, rank, competition in rank_and_competition(entries) if player in asked]
    there = {row[0] for row in on}
    absent = [player for i, player in enumerate(players) if player not in there and player not in players[:i]]
    return [(*row, place) for place, row in enumerate(on, start=1)], absent
