"""The big part's reads: top, a player's rank and around-me, answered from the loaded board.

The big log (``logs.one_result_per_player``) gives player ``i`` one result of
``points[i]`` points, played in ``i``'s order within one day and one ISO week, so on each
of the game's 4 boards the order is points descending, then ``i`` ascending (ids are
``i`` zero-padded, so the id order agrees). The exact ranks follow from a count of the
players per points value, without sorting 10M entries; the Redis reader's answers
(``connectors.board_read.BoardReader``, the CLI's and the API's ``redis`` index) are
compared with them, each query timed (one client, the flow stopped).
"""

from __future__ import annotations

import random
import time
from array import array
from typing import Any

import redis

from rankflow.bench import rig
from rankflow.bench.boards.results import GAME, Big
from rankflow.connectors.board_read import BoardReader

POINTS = range(0, 10_001, 5)  # as one_result_per_player draws them
BOARDS = ("all", "best", "daily", "weekly")  # the last two are aliases of the log's day and week


class Ranks:
    """Every player's exact rank and competition rank on the big log's boards."""

    def __init__(self, players: int, seed: int) -> None:
        rng = random.Random(seed)
        self.points = array("H", (rng.randrange(0, 10_001, 5) for _ in range(players)))
        per_value = [0] * (POINTS.stop)
        self.within = array("I", bytes(4 * players))  # players before i with i's points
        self.firsts: dict[int, list[int]] = {}  # per points value its first 100 players
        for i, p in enumerate(self.points):
            self.within[i] = per_value[p]
            per_value[p] += 1
            if per_value[p] <= 100:
                self.firsts.setdefault(p, []).append(i)
        self.better = [0] * (POINTS.stop)  # players with more points than the value
        total = 0
        for p in reversed(range(POINTS.stop)):
            self.better[p] = total
            total += per_value[p]
        self.digits = max(7, len(str(players - 1)))

    def player(self, i: int) -> str:
        return f"p{i:0{self.digits}d}"

    def answer(self, i: int) -> tuple[int, int, int]:
        """``(score, rank, competition_rank)`` of player ``i``."""
        p = self.points[i]
        return p, self.better[p] + self.within[i] + 1, self.better[p] + 1

    def top(self, n: int) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        for p in sorted(self.firsts, reverse=True):
            out.extend((self.player(i), p) for i in self.firsts[p][:n - len(out)])
            if len(out) >= n:
                break
        return out


def check_reads(client: redis.Redis, namespace: str, out: Big, players: int, seed: int, samples: int = 1000) -> None:
    ranks, reader, rng = Ranks(players, seed), BoardReader(client, namespace), random.Random(seed + 1)
    times: dict[str, list[float]] = {"top n=100": [], "player rank": [], "around r=5": []}
    expected_top = ranks.top(100)

    def timed(kind: str, call: Any, *args: Any) -> Any:
        started = time.perf_counter()
        answer = call(*args)
        times[kind].append(time.perf_counter() - started)
        return answer

    wrong = checked = 0
    for k in range(samples):
        board = BOARDS[k % len(BOARDS)]
        top = timed("top n=100", reader.top, GAME, board, 100)
        items = [(e["player_id"], e["score"]) for e in top["items"]]
        wrong += items != expected_top or top["total_players"] != players
        i = rng.randrange(players)
        got = timed("player rank", reader.player, GAME, board, ranks.player(i))
        wrong += (got["score"], got["rank"], got["competition_rank"]) != ranks.answer(i)
        if k % 10 == 0:
            near = timed("around r=5", reader.around, GAME, board, ranks.player(i), 5)
            rank = ranks.answer(i)[1]
            for item in near["items"]:
                j = int(item["player_id"][1:])
                wrong += (item["score"], item["rank"], item["competition_rank"]) != ranks.answer(j)
            wrong += [e["rank"] for e in near["items"]] != list(range(max(1, rank - 5), min(players, rank + 5) + 1))
            checked += 1
        checked += 2
    out.reads_checked, out.reads_wrong = checked, wrong
    out.read_ms = {kind: {"p50_ms": round(1000 * (rig.percentile(t, 0.5) or 0), 3),
                          "p99_ms": round(1000 * (rig.percentile(t, 0.99) or 0), 3)} for kind, t in times.items()}
