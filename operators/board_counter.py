"""The boards flow's counter table: each partition's top entries of every score board.

Contract (the counter stage of ``operators.counter``, keyed by board partition
``"0"`` .. ``"P-1"``; a player's entries all go to partition ``crc32(player) % P``):

* **Input**: :class:`operators.routing.BoardBatch` items from ``operators.routing.route_board_entries``:
  ``operators.player_stage.Entry`` upserts decided by the per-player stage (a player's new score and
  ``reached_at`` on one board), and barrier ticks (the engine's ``Tick``).
* **State**: per board ``(game_id, board)`` a :class:`state.ranking_index.MonotoneTop`
  of this partition's best ``K_max`` entries (entries only improve) and the number of its players here
  (an entry flagged ``new`` is a player joining the board), and the open epoch's
  entries, newest per player and board (a barrier can fall before the epoch closes
  here: they must survive it). Boards the partition
  knows to be dropped by retention (docs/semantics/boards.md section 7, judged by the newest
  periods *this* partition has seen, never newer than the game's) are forgotten.
* **Output**: when epoch ``e`` closes, one :class:`BoardsReport`: for every board
  that changed here in ``e`` its player count and, if it changed, its local top
  ``K_max`` (most entries of a big board never reach its top), and the entries of
  ``e`` on the boards still held, as :data:`BoardEntries` per board (the merger passes
  them on to Redis, which holds whole boards: exact ranks for every player come from
  there; grouped by board here, where each change is touched anyway, the merger and
  publisher only join dicts, in C). So the boards of a report's entries are the boards
  it reports.
"""

from __future__ import annotations

import logging
import time
from typing import Any, NamedTuple

from rankflow.operators.routing import BoardBatch
from rankflow.state.board_rules import is_kept, newest_periods
from rankflow.state.ranking_index import MonotoneTop

log = logging.getLogger("rankflow.boards")

BoardId = tuple[str, str]  # (game_id, board)
BoardEntries = dict[str, tuple[int, int]]
"""A board's entries of one epoch: ``player_id -> (score, reached_at)``, the newest."""


class BoardsReport(NamedTuple):
    """A board partition's changes at the close of ``epoch``."""

    epoch: int
    boards: dict[BoardId, tuple[list[tuple[str, int, int]] | None, int]]
    """Changed boards: (local top, or None when only the player count changed; players here)."""
    entries: dict[BoardId, BoardEntries]
    errors: list[str]
    closed_at: float


class _Board:
    """One board in one partition: its bounded top, its players here, and the open epoch's entries."""

    __slots__ = ("top", "players", "entries")

    def __init__(self, top: MonotoneTop) -> None:
        self.top, self.players = top, 0
        self.entries: BoardEntries = {}


class BoardTable:
    """One board partition: per board a bounded :class:`MonotoneTop`, its player count and the
    open epoch's entries, together so that a change looks its board up once."""

    def __init__(self, k_max: int, resume: dict[str, Any] | None = None,
                 season_ends: dict[str, str] | None = None) -> None:
        """``season_ends``: each season's board and its last day (retention, ``board_rules.is_kept``)."""
        self.k_max = k_max
        self.season_ends = season_ends or None
        self.boards: dict[BoardId, _Board] = {}
        self.games: dict[str, set[str]] = {}  # game -> its boards held here
        for bid, (entries, players) in (resume or {}).get("boards", {}).items():
            board = self._board(bid)
            board.top, board.players = MonotoneTop(k_max, entries), players
        # the open epoch's entries, applied to the tops already, reported when it closes: kept in the
        # recovery state, since a barrier may fall before the epoch closes here (Bytewax never replays it)
        for bid, mine in _open_entries((resume or {}).get("entries")).items():
            (self.boards.get(bid) or self._board(bid)).entries = mine
        self.errors: list[str] = []

    def _board(self, bid: BoardId) -> _Board:
        board = self.boards[bid] = _Board(MonotoneTop(self.k_max))
        self.games.setdefault(bid[0], set()).add(bid[1])
        return board

    def stage(self, batch: BoardBatch) -> None:
        boards = self.boards
        for player, changes in batch.entries:
            for game, name, score, reached_at, new in changes:
                board = boards.get((game, name))
                if board is None:
                    board = self._board((game, name))
                if new:
                    board.players += 1
                if not board.top.offer(player, score, reached_at):
                    self.errors.append(f"entry got worse: {player} on {game}/{name} -> {score} at {reached_at}")
                board.entries[player] = (score, reached_at)

    def close(self, epoch: int) -> BoardsReport:
        changed = {bid: board for bid, board in self.boards.items() if board.entries}
        self._retire(changed)
        report: dict[BoardId, tuple[list[tuple[str, int, int]] | None, int]] = {}
        entries: dict[BoardId, BoardEntries] = {}
        for bid, board in changed.items():
            entries[bid], board.entries = board.entries, {}
            if bid in self.boards:  # not dropped by retention just now (the merger decides what its entries do:
                top = board.top  # they make its final standings, docs/semantics/boards.md 9, or nothing)
                report[bid] = (top.top(self.k_max) if top.changed else None, board.players)
                top.changed = False
        errors, self.errors = self.errors, []
        for e in errors:
            log.error("epoch %s: %s", epoch, e)
        return BoardsReport(epoch, report, entries, errors, time.time())

    def _retire(self, changed: dict[BoardId, _Board]) -> None:
        """Forget the boards retention dropped, judged by the newest periods held here."""
        for game in {game for game, _ in changed}:
            boards = self.games[game]
            daily, weekly = newest_periods(boards)
            for board in [b for b in boards if not is_kept(b, daily, weekly, self.season_ends)]:
                boards.discard(board)
                del self.boards[(game, board)]

    def state(self) -> dict[str, Any]:
        return {"boards": {bid: (b.top.top(self.k_max), b.players) for bid, b in self.boards.items()},
                "entries": {bid: dict(b.entries) for bid, b in self.boards.items() if b.entries}}


def _open_entries(saved: Any) -> dict[BoardId, BoardEntries]:
    """The open epoch's entries from a recovery state; one written before they were grouped
    by board (a list of ``(player, changes)``) is regrouped, so such a state still resumes."""
    if not saved:
        return {}
    if isinstance(saved, dict):
        return {bid: dict(mine) for bid, mine in saved.items()}
    grouped: dict[BoardId, BoardEntries] = {}
    for player, changes in saved:
        for game, board, score, reached_at, _ in changes:
            grouped.setdefault((game, board), {})[player] = (score, reached_at)
    return grouped
