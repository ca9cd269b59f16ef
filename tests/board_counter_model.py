"""The oracle of the board partitions' table: the Python table the kernel replaced.

``MonotoneTop`` and ``BoardTableModel`` are the Python forms of ``native/src/board_table.rs``
as they ran in the flow before it (``state.ranking_index.MonotoneTop`` and
``operators.board_counter.BoardTable``), kept here as a small reference model: property tests
run the kernel and this model over the same generated entry streams and compare every report,
error and top. ``BoardTableModel.state()`` is also the recovery state the Python table wrote,
which the kernel's table must still resume. ``KernelTop`` is the kernel's table on one board,
behind ``MonotoneTop``'s methods, so the index tests run both.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable
from typing import Any, ClassVar

from rankflow import _native
from rankflow.state.board_rules import is_kept, newest_periods
from rankflow.state.ranking_index import SCORE_THEN_FIRST_REACHED, RankOrder

BoardId = tuple[str, str]
BoardKey = tuple[int, int, str]


class MonotoneTop:
    """The best ``capacity`` entries ``(id, score, reached_at)`` of a table whose entries only
    improve, in :data:`SCORE_THEN_FIRST_REACHED` order; ``offer`` refuses an entry that got worse."""

    __slots__ = ("capacity", "changed", "_keys", "_index", "_floor")

    order: ClassVar[RankOrder] = SCORE_THEN_FIRST_REACHED

    def __init__(self, capacity: int, entries: Iterable[tuple[str, int, int]] = ()) -> None:
        self.capacity = capacity
        self.changed = False
        self._keys: dict[str, BoardKey] = {}
        self._index: list[BoardKey] = []
        self._floor: BoardKey | None = None
        for entry_id, score, reached_at in entries:
            self.offer(entry_id, score, reached_at)

    def offer(self, entry_id: str, score: int, reached_at: int) -> bool:
        keys, floor = self._keys, self._floor
        if floor is not None and -score > floor[0] and entry_id not in keys:
            return True
        key = (-score, reached_at, entry_id)
        index = self._index
        old = keys.get(entry_id)
        if old is not None:
            if key >= old:
                return key == old
            del index[bisect_left(index, old)]
        elif floor is not None:
            if key > floor:
                return True
            del keys[index.pop()[2]]
        insort(index, key)
        keys[entry_id] = key
        if len(index) >= self.capacity:
            self._floor = index[-1]
        self.changed = True
        return True

    def top(self, k: int) -> list[tuple[str, int, int]]:
        return [(entry_id, -s, at) for s, at, entry_id in self._index[:k]]

    def __len__(self) -> int:
        return len(self._index)

    def _check(self) -> None:
        index = self._index
        assert all(a < b for a, b in zip(index, index[1:])), "held keys strictly ascending"
        assert len(index) <= max(self.capacity, 1), "at most capacity entries"
        assert self._keys == {key[2]: key for key in index}, "the id map agrees with the held keys"
        assert self._floor == (index[-1] if len(index) >= self.capacity else None), "the floor is the last held"


class KernelTop:
    """The kernel's table holding one board, offered entries one at a time like a ``MonotoneTop``."""

    order: ClassVar[RankOrder] = SCORE_THEN_FIRST_REACHED

    def __init__(self, capacity: int, entries: Iterable[tuple[str, int, int]] = ()) -> None:
        self.table = _native.BoardTable(capacity)
        for entry in entries:
            self.offer(*entry)

    def offer(self, entry_id: str, score: int, reached_at: int) -> bool:
        self.table.stage(entries_bytes([(entry_id, (("g", "all", score, reached_at, False),))]))
        return not self.table.close(lambda game, boards: [])[2]  # a refused entry is the epoch's error

    def top(self, k: int) -> list[tuple[str, int, int]]:
        return self.table.top("g", "all", k)

    def __len__(self) -> int:
        return len(self.table.top("g", "all", 1 << 30))

    def _check(self) -> None:
        self.table._check()


class _Board:
    __slots__ = ("top", "players", "entries")

    def __init__(self, top: MonotoneTop) -> None:
        self.top, self.players = top, 0
        self.entries: dict[str, tuple[int, int]] = {}


class BoardTableModel:
    """One board partition as the Python table held it: per board a ``MonotoneTop``, its player
    count and the open epoch's entries; ``close`` gives ``(boards, entries, errors)``."""

    def __init__(self, k_max: int, resume: dict[str, Any] | None = None,
                 season_ends: dict[str, str] | None = None) -> None:
        self.k_max = k_max
        self.season_ends = season_ends or None
        self.boards: dict[BoardId, _Board] = {}
        self.games: dict[str, set[str]] = {}
        for bid, (entries, players) in (resume or {}).get("boards", {}).items():
            board = self._board(bid)
            board.top, board.players = MonotoneTop(k_max, entries), players
        for bid, mine in (resume or {}).get("entries", {}).items():
            (self.boards.get(bid) or self._board(bid)).entries = dict(mine)
        self.errors: list[str] = []

    def _board(self, bid: BoardId) -> _Board:
        board = self.boards[bid] = _Board(MonotoneTop(self.k_max))
        self.games.setdefault(bid[0], set()).add(bid[1])
        return board

    def stage(self, entries: list[tuple[str, tuple[tuple[str, str, int, int, bool], ...]]]) -> None:
        for player, changes in entries:
            for game, name, score, reached_at, new in changes:
                board = self.boards.get((game, name)) or self._board((game, name))
                if new:
                    board.players += 1
                if not board.top.offer(player, score, reached_at):
                    self.errors.append(f"entry got worse: {player} on {game}/{name} -> {score} at {reached_at}")
                board.entries[player] = (score, reached_at)

    def close(self) -> tuple[dict, dict, list[str]]:
        changed = {bid: board for bid, board in self.boards.items() if board.entries}
        for game in {game for game, _ in changed}:
            boards = self.games[game]
            daily, weekly = newest_periods(boards)
            for name in [b for b in boards if not is_kept(b, daily, weekly, self.season_ends)]:
                boards.discard(name)
                del self.boards[(game, name)]
        report, entries = {}, {}
        for bid, board in changed.items():
            entries[bid], board.entries = board.entries, {}
            if bid in self.boards:
                report[bid] = (board.top.top(self.k_max) if board.top.changed else None, board.players)
                board.top.changed = False
        errors, self.errors = self.errors, []
        return report, entries, errors

    def state(self) -> dict[str, Any]:
        return {"boards": {bid: (b.top.top(self.k_max), b.players) for bid, b in self.boards.items()},
                "entries": {bid: dict(b.entries) for bid, b in self.boards.items() if b.entries}}


def entries_bytes(entries: list[Any]) -> bytes:
    """A call's entries ``[(player, changes), ...]`` as the bytes the kernel's table stages (the
    routing's ``_native.board_partitions``, all to one partition)."""
    return b"".join(blob for _, blob in _native.board_partitions(entries, 1))
