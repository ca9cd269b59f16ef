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
  boards' sorted sets in Redis together with the snapshot.
"""

from __future__ import annotations

import logging
from typing import Any

from rankflow.operators.board_counter import BoardEntries, BoardId, BoardsReport
from rankflow.operators.merger import Cut, lag_ms
from rankflow.state.board_rules import is_kept, newest_periods
from rankflow.state.board_snapshot import BoardsSnapshot
from rankflow.state.ranking_index import SCORE_THEN_FIRST_REACHED, merge_local_tops

log = logging.getLogger("rankflow.boards")

LocalTops = dict[str, tuple[list[tuple[str, int, int]], int]]  # partition -> (local top, players there)


class BoardRanking:
    """Per board the partitions' latest local tops; per game its newest periods."""

    def __init__(self, k_max: int, resume: dict[str, Any] | None = None) -> None:
        self.k_max = k_max
        self.local: dict[BoardId, LocalTops] = {bid: dict(parts) for bid, parts in (resume or {}).get("local", {}).items()}
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
        aliases, dropped = self._advance({game for game, _ in changed})
        if not self.announced:  # Redis may have lost them while the run was down
            self.announced = True
            aliases = {**self.newest, **aliases}
        dropped = [bid for bid in dropped if bid in known]  # a late result for a dropped period: never published
        kept = {bid for bid in changed if bid in self.local}
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
            boards={bid: self._merged(bid) for bid in sorted(kept)},
            entries=entries, dropped=sorted(dropped), aliases=aliases,
            partition_lag_ms=lag_ms(cut, reports), errors=errors, total_boards=len(self.local),
        )

    def _merged(self, bid: BoardId) -> tuple[int, list[tuple[str, int, int]]]:
        """The board's players and its global top ``K_max`` from the partitions' lists."""
        parts = self.local[bid].values()
        top = self.merged.get(bid)
        if top is None:
            top = self.merged[bid] = merge_local_tops([top for top, _ in parts], self.k_max, SCORE_THEN_FIRST_REACHED)
        return sum(n for _, n in parts), top

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
            for board in [b for b in boards if not is_kept(b, daily, weekly)]:
                boards.discard(board)
                del self.local[(game, board)]
                self.merged.pop((game, board), None)
                dropped.append((game, board))
        return aliases, dropped

    def state(self) -> dict[str, Any]:
        return {"local": {bid: dict(parts) for bid, parts in self.local.items()}, "newest": dict(self.newest)}
