"""A published state of the score boards: what one barrier of the boards flow names.

The snapshot document (JSON, in Redis and in the snapshots stream) says which input
it includes and what changed: each changed board's player count and top ``K_max``,
the games whose newest periods (the aliases ``daily`` and ``weekly``) moved, and
the periods retention dropped. The whole boards are sorted sets in Redis, written
by the same atomic script from :attr:`BoardsSnapshot.entries`, so every rank a
reader asks for comes from the snapshot the document names.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from rankflow.state.snapshot import Gauge, cut_gauges, cut_header, dead_letters_by_reason

Board = tuple[str, str]  # (game_id, board)


class BoardsSnapshot(NamedTuple):
    """One consistent cut of the score log, ready to publish."""

    snapshot_id: int
    run: int
    epoch: int
    positions: dict[str, int]
    dead_letters: int
    k_max: int
    boards: dict[Board, tuple[int, list[tuple[str, int, int]]]]  # changed: (players, top (player, score, reached_at))
    entries: dict[Board, dict[str, tuple[int, int]]]
    """To Redis: per changed board its players' new ``(score, reached_at)``, the newest of the epoch."""
    dropped: list[Board]
    aliases: dict[str, tuple[str | None, str | None]]  # games whose newest periods moved: (daily, weekly)
    partition_lag_ms: dict[str, int]
    errors: list[str]
    closed: list[Board] = []  # periods dropped whose board becomes their final standings (section 9)
    expired: list[Board] = []  # finals older than --keep-final: deleted
    counts: dict[str, int] = {}  # running totals: "duplicates", "dead_letters.<reason>"
    total_boards: int = 0  # the boards there are after this snapshot (the metrics' gauge; not in the JSON)

    def to_json_obj(self, published_at_ms: int) -> dict[str, Any]:
        games: dict[str, dict[str, Any]] = {}
        for (game, board), (players, top) in self.boards.items():
            games.setdefault(game, {})[board] = {
                "total_players": players,
                "top": [{"rank": i, "player_id": p, "score": s, "reached_at": at}
                        for i, (p, s, at) in enumerate(top, start=1)],
            }
        return {
            **cut_header(self, published_at_ms),
            "dead_letters": self.dead_letters,
            "dead_letters_by_reason": dead_letters_by_reason(self.counts),
            "duplicates": self.counts.get("duplicates", 0),
            "k_max": self.k_max,
            "changed_boards": games,
            "aliases": {g: {"daily": d, "weekly": w} for g, (d, w) in sorted(self.aliases.items())},
            "dropped_boards": [{"game_id": g, "board": b} for g, b in self.dropped],
            "partition_lag_ms": self.partition_lag_ms,
            "errors": self.errors,
            **({"final_boards": [{"game_id": g, "board": b} for g, b in self.closed]} if self.closed else {}),
            **({"expired_finals": [{"game_id": g, "board": b} for g, b in self.expired]} if self.expired else {}),
        }

    def gauges(self) -> list[Gauge]:
        """What ``--metrics-port`` shows of the boards flow's last snapshot."""
        return [*cut_gauges(self.snapshot_id, self.partition_lag_ms),
                Gauge("boards", "Boards there are (the generation's set of boards)", self.total_boards),
                Gauge("changed_boards", "Boards the last snapshot changed", len(self.boards)),
                Gauge("dropped_boards", "Periods the last snapshot dropped (retention)", len(self.dropped))]
