"""The boards flow's combiner: every changed board's global top, retention and aliases.

The merger (``operators.merger``) completes an epoch when every board partition
reported it; this combiner then

* merges each changed board's local top lists into its global top ``K_max``: a
  player missing from their partition's local top has ``K_max`` entries ahead of
  them there, so the P local lists hold the global top (as for songs);
* moves each game's newest daily and weekly period (the aliases ``daily`` and
  ``weekly``, docs/semantics/boards.md section 3) forward, and drops the periods retention no
  longer keeps (section 7): they leave the snapshot and Redis, and an entry for one
  arriving later is not published;
* passes on the epoch's entries of kept boards, which the publisher writes into the
  boards' sorted sets in Redis together with the snapshot;
* with ``keep_final`` days (``--keep-final``, docs/semantics/boards.md section 9), turns each
  period it drops into its final standings instead (the board as this snapshot leaves it,
  this epoch's entries included: the publisher renames its keys), and drops the finals
  older than that, each once: a period never returns, so a final is never made twice.
"""

from __future__ import annotations

import datetime
import logging
import pickle
from typing import Any

import orjson

from rankflow.operators.board_counter import BoardEntries, BoardId, BoardsReport
from rankflow.operators.merger import Cut, lag_ms
from rankflow.state.board_rules import DAILY, FINAL, WEEKLY, is_kept, kept_daily, newest_periods
from rankflow.state.board_snapshot import BoardsSnapshot
from rankflow.state.ranking_index import SCORE_THEN_FIRST_REACHED, merge_local_tops

log = logging.getLogger("rankflow.boards")

LocalTops = dict[str, tuple[list[tuple[str, int, int]], int]]  # partition -> (local top, players there)


class BoardRanking:
    """Per board the partitions' latest local tops; per game its newest periods."""

    def __init__(self, k_max: int, resume: dict[str, Any] | None = None, season_ends: dict[str, str] | None = None,
                 keep_final: int = 0, recoverable: bool = True) -> None:
        """``season_ends``: each season's board and its last day (retention's); ``keep_final``: the
        days a final is kept after its period's drop (0: no finals, a dropped period is deleted);
        ``recoverable`` False: no recovery, so :meth:`state` keeps nothing (nobody reads it)."""
        self.k_max = k_max
        self.recoverable = recoverable
        self.season_ends = season_ends or None
        self.keep_final = keep_final
        self.finals: dict[BoardId, str] = {bid: day for bid, day in (resume or {}).get("finals", {}).items()}
        """The finals kept in Redis: each with its period's last day (when it expires)."""
        self.stored: dict[BoardId, bytes] = {}
        """Per board its local tops encoded as :meth:`state` stores them, while they do not change."""
        self.local: dict[BoardId, LocalTops] = {}
        for bid, parts in (resume or {}).get("local", {}).items():
            if isinstance(parts, bytes):  # stored encoded per board (:meth:`state`)
                self.local[bid] = _decoded(parts)
                self.stored[bid] = parts
            else:  # a dict per board: stored before (a recovery directory of earlier code)
                self.local[bid] = dict(parts)
        self.newest: dict[str, tuple[str | None, str | None]] = dict((resume or {}).get("newest", {}))
        self.merged: dict[BoardId, list[tuple[str, int, int]]] = {}  # cache: boards whose tops did not change
        self.announced = False  # every game's aliases go with an execution's first snapshot
        self.games: dict[str, set[str]] = {}  # game -> its boards
        for game, board in self.local:
            self.games.setdefault(game, set()).add(board)

    def combine(self, cut: Cut, reports: dict[str, BoardsReport]) -> BoardsSnapshot:
        changed: set[BoardId] = set()
        known = set(self.local)
        for part, report in reports.items():
            for bid, (top, players) in report.boards.items():
                parts = self.local.get(bid)
                if parts is None:
                    parts = self.local[bid] = {}
                    self.games.setdefault(bid[0], set()).add(bid[1])
                if top is None:
                    top = parts[part][0] if part in parts else []
                else:
                    self.merged.pop(bid, None)
                parts[part] = (top, players)
                changed.add(bid)
                self.stored.pop(bid, None)
        games = {game for game, _ in changed}
        aliases, dropped = self._advance(games)
        closing: list[BoardId] = []
        expired: list[BoardId] = []
        if self.keep_final:  # what retention drops now, or a late result for a period dropped before
            late = {bid for report in reports.values() for bid in report.entries if bid not in self.local}
            closing, expired = self._finals(sorted(late.union(dropped)), games)
            shut = set(closing)
            dropped = [bid for bid in dropped if bid not in shut]
        if not self.announced:  # Redis may have lost them while the run was down
            self.announced = True
            aliases = {**self.newest, **aliases}
        dropped = [bid for bid in dropped if bid in known]  # a late result for a dropped period: never published
        kept = {bid for bid in changed if bid in self.local}
        if closing:  # a final holds the results of the snapshot that closed it
            kept.update(closing)
        entries: dict[BoardId, BoardEntries] = {}
        for report in reports.values():  # partitions hold disjoint players: joining their dicts loses none
            for bid, mine in report.entries.items():
                if bid in kept:  # not a late result for a dropped period (never published)
                    got = entries.get(bid)
                    if got is None:
                        entries[bid] = dict(mine)
                    else:
                        got.update(mine)
        errors = [e for _, r in sorted(reports.items()) for e in r.errors]
        return BoardsSnapshot(
            snapshot_id=cut.snapshot_id, run=cut.run, epoch=cut.epoch, positions=cut.positions,
            dead_letters=cut.dead_letters, counts=cut.counts, k_max=self.k_max,
            boards={bid: self._merged(bid) for bid in sorted(kept) if bid in self.local},
            entries=entries, dropped=sorted(dropped), aliases=aliases, closed=sorted(closing), expired=sorted(expired),
            partition_lag_ms=lag_ms(cut, reports), errors=errors, total_boards=len(self.local),
        )

    def _merged(self, bid: BoardId) -> tuple[int, list[tuple[str, int, int]]]:
        """The board's players and its global top ``K_max`` from the partitions' lists."""
        parts = self.local[bid].values()
        top = self.merged.get(bid)
        if top is None:
            top = self.merged[bid] = merge_local_tops([top for top, _ in parts], self.k_max, SCORE_THEN_FIRST_REACHED)
        return sum(n for _, n in parts), top

    def _finals(self, dropped: list[BoardId], games: set[str]) -> tuple[list[BoardId], list[BoardId]]:
        """Of the periods not kept that got results, those that become finals (not one already, nor
        older than a final is kept: a final is made once, at the first snapshot that has a result
        for the period and does not keep it); and the finals of the changed games now too old."""
        closing: list[BoardId] = []
        for bid in dropped:
            day = self._last_day(bid)
            if bid not in self.finals and self._final_kept(bid[0], day):
                self.finals[bid] = day
                closing.append(bid)
        expired = [bid for bid, day in self.finals.items() if bid[0] in games and not self._final_kept(bid[0], day)]
        for bid in expired:
            del self.finals[bid]
        return closing, expired

    def _final_kept(self, game: str, last_day: str) -> bool:
        """A final is kept while its period's last day is at most 7 + ``keep_final`` days before the
        game's newest day (it was dropped once more than 7 days before it)."""
        newest = self.newest.get(game, (None, None))[0]
        return newest is None or last_day >= _days_before(kept_daily(newest), self.keep_final)

    def _last_day(self, bid: BoardId) -> str:
        board = bid[1]
        if board.startswith(DAILY):
            return board[len(DAILY):]
        if board.startswith(WEEKLY):
            return _sunday(board[len(WEEKLY):])
        assert self.season_ends is not None
        return self.season_ends[board]

    def _advance(self, games: set[str]) -> tuple[dict[str, tuple[str | None, str | None]], list[BoardId]]:
        """Move the games' newest periods forward; drop the boards no longer kept."""
        aliases: dict[str, tuple[str | None, str | None]] = {}
        dropped: list[BoardId] = []
        for game in games:
            boards = self.games[game]
            newest = newest_periods(boards)
            if newest != self.newest.get(game):
                self.newest[game] = aliases[game] = newest
            daily, weekly = newest
            for board in [b for b in boards if not is_kept(b, daily, weekly, self.season_ends)]:
                boards.discard(board)
                del self.local[(game, board)]
                self.merged.pop((game, board), None)
                self.stored.pop((game, board), None)
                dropped.append((game, board))
        return aliases, dropped

    def state(self) -> dict[str, Any] | None:
        """Per board its partitions' local tops encoded on their own (:func:`_encoded`), ``{"local":
        {board: bytes}, ...}``, each encoded again only after a barrier changed it: the merger's
        snapshot is taken at every barrier, and the boards a barrier left alone (about half of them
        on the benchmark's backlog: the periods but the newest) cost Bytewax a copy of bytes, not a
        pickle of their entries' tuples. A board stored as a
        dict (by earlier code) resumes as it is. Without recovery, nothing (Bytewax calls the
        snapshot all the same, and pickles it only with recovery)."""
        if not self.recoverable:
            return None
        stored = self.stored
        for bid, parts in self.local.items():
            if bid not in stored:
                stored[bid] = _encoded(parts)
        out: dict[str, Any] = {"local": dict(stored), "newest": dict(self.newest)}
        if self.finals:
            out["finals"] = dict(self.finals)
        return out


def _encoded(parts: LocalTops) -> bytes:
    """A board's local tops as stored: JSON (orjson writes these lists of ``(player, score,
    reached_at)`` 2-5 times as fast as pickle does), or a pickle when a score is beyond 64 bits."""
    try:
        return orjson.dumps(parts)
    except orjson.JSONEncodeError:
        return pickle.dumps(parts, protocol=pickle.HIGHEST_PROTOCOL)


def _decoded(stored: bytes) -> LocalTops:
    """:func:`_encoded`'s bytes back, entries as tuples again (a pickle starts with ``0x80``)."""
    if stored[:1] != b"{":
        parts: LocalTops = pickle.loads(stored)  # written by state(), read back from Bytewax's store
        return parts
    return {part: ([(p, s, r) for p, s, r in top], players) for part, (top, players) in orjson.loads(stored).items()}


def final_name(board: str) -> str:
    """The name a dropped period's final standings are read by: ``final:`` and the period's board."""
    return FINAL + board


def _days_before(day: str, days: int) -> str:
    return (datetime.date.fromisoformat(day) - datetime.timedelta(days=days)).isoformat()


def _sunday(week: str) -> str:
    """The last day of an ISO week ``YYYY-Www``."""
    return datetime.date.fromisocalendar(int(week[:4]), int(week[6:]), 7).isoformat()
