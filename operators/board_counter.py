"""The boards flow's counter table: each partition's top entries of every score board.

Contract (the counter stage of ``operators.counter``, keyed by board partition
``"0"`` .. ``"P-1"``; a player's entries all go to partition ``crc32(player) % P``):

* **Input**: :class:`operators.routing.BoardBatch` items from ``operators.routing.route_board_entries``:
  ``operators.player_stage.Entry`` upserts decided by the per-player stage (a player's new score and
  ``reached_at`` on one board), and barrier ticks (the engine's ``Tick``).
* **State**: per board ``(game_id, board)`` this partition's best ``K_max`` entries (entries only
  improve: a bounded top, ``native/src/board_table.rs``) and the number of its players here
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

The table is the kernel's (``rankflow._native.BoardTable``, docs/design.md "The board counters
in the kernel"): a call's entries go in as the bytes the routing wrote (``BoardBatch``) and no
Python object is made per entry but a player's id until an epoch's report; retention stays
here, in the rules the merger shares (``state.board_rules``), asked once per changed game at an
epoch's close. Its recovery state
is compact bytes; a state written by the Python table before (a dict) still resumes.
"""

from __future__ import annotations

import logging
import time
from typing import Any, NamedTuple

from rankflow import _native
from rankflow.operators.routing import BoardBatch
from rankflow.state.board_rules import is_kept, newest_periods

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


class BoardTable:
    """One board partition: the kernel's table, with retention and the report's shape."""

    __slots__ = ("k_max", "season_ends", "_table")

    def __init__(self, k_max: int, resume: bytes | dict[str, Any] | None = None,
                 season_ends: dict[str, str] | None = None) -> None:
        """``resume``: a recovery state, the kernel's bytes or the Python table's dict of
        before; ``season_ends``: each season's board and its last day (retention,
        ``board_rules.is_kept``)."""
        self.k_max = k_max
        self.season_ends = season_ends or None
        if isinstance(resume, bytes):
            self._table = _native.BoardTable(k_max, resume)
            return
        self._table = _native.BoardTable(k_max)
        for (game, board), (entries, players) in (resume or {}).get("boards", {}).items():
            self._table.resume_top(game, board, entries, players)
        # the open epoch's entries, applied to the tops already, reported when it closes: kept in the
        # recovery state, since a barrier may fall before the epoch closes here (Bytewax never replays it)
        for (game, board), mine in _open_entries((resume or {}).get("entries")).items():
            self._table.resume_open(game, board, mine)

    def stage(self, batch: BoardBatch) -> None:
        self._table.stage(batch.entries)

    def close(self, epoch: int) -> BoardsReport:
        boards, entries, errors = self._table.close(self._dropped)
        for e in errors:
            log.error("epoch %s: %s", epoch, e)
        return BoardsReport(epoch, boards, entries, errors, time.time())

    def _dropped(self, game: str, boards: list[str]) -> list[str]:
        """The boards of a game that retention drops, judged by the newest periods held here
        (never newer than the game's: docs/semantics/boards.md section 7)."""
        daily, weekly = newest_periods(boards)
        return [board for board in boards if not is_kept(board, daily, weekly, self.season_ends)]

    @property
    def boards(self) -> set[BoardId]:
        """The boards held here."""
        return set(self._table.boards())

    def state(self) -> bytes:
        return self._table.state()


def _open_entries(saved: Any) -> dict[BoardId, BoardEntries]:
    """The open epoch's entries from a Python table's recovery state; one written before they were
    grouped by board (a list of ``(player, changes)``) is regrouped, so such a state still resumes."""
    if not saved:
        return {}
    if isinstance(saved, dict):
        return {bid: dict(mine) for bid, mine in saved.items()}
    grouped: dict[BoardId, BoardEntries] = {}
    for player, changes in saved:
        for game, board, score, reached_at, _ in changes:
            grouped.setdefault((game, board), {})[player] = (score, reached_at)
    return grouped
