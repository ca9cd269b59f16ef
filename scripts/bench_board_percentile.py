"""What a player's ``percentile`` costs the in-process mirror's rank answer (docs/semantics/boards.md 5.2).

    .venv/bin/python scripts/bench_board_percentile.py [--players 200000] [--calls 2000] [--rounds 21]

The mirror (``api.board_mirror``, ``--board-index memory``) answers a player's rank in O(log n);
issue 42 adds the player's ``percentile`` to that answer (and an untaken ``ties`` branch). One
board of ``--players`` random entries in one process; each round answers ``--calls`` random
players with the answer as it was built before (the same lines without the percentile) and as
built now (``BoardMirror._player``), in alternating order, and prints the CPU time per answer
(``time.process_time``) of each: the medians and their ratio. The JSON encoding is not counted
(one more field of some 20 bytes).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

from rankflow.api.board_mirror import BoardMirror
from rankflow.connectors.snapshot_age import stamp
from rankflow.state.board_index import BoardIndex, BoardsCopy, LiveBoards, entry_fields, entry_key


def mirror_of(players: int) -> tuple[BoardMirror, list[str]]:
    rng = random.Random(1)
    keys = {f"p{i:07}": entry_key(f"p{i:07}", rng.randrange(0, 100_000), rng.randrange(0, 10**12))
            for i in range(players)}
    mirror = BoardMirror.__new__(BoardMirror)  # the query side only: no Redis
    mirror._buffer = LiveBoards(BoardsCopy(1, {("g", "all"): BoardIndex.of(keys, sorted(keys.values()))}, {}, 0))
    mirror._missing = None
    return mirror, sorted(keys)


def before(mirror: BoardMirror, player: str) -> dict:
    """The rank's answer as ``BoardMirror._player`` built it before issue 42."""
    copy, name, index = mirror._board("g", "all")
    key = index.key(player)
    assert key is not None
    score = entry_fields(key)[1]
    return {**stamp(copy.snapshot_id, copy.published_at), "game_id": "g", "board": name, "player_id": player,
            "score": score, "rank": index.below(key) + 1, "competition_rank": index.better_than(score) + 1}


def per_answer_us(answer: Callable[[str], dict], players: list[str]) -> float:
    started = time.process_time()
    for player in players:
        answer(player)
    return (time.process_time() - started) * 1e6 / len(players)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--players", type=int, default=200_000)
    p.add_argument("--calls", type=int, default=2_000)
    p.add_argument("--rounds", type=int, default=21)
    a = p.parse_args()
    mirror, ids = mirror_of(a.players)
    asked = random.Random(2).sample(ids, a.calls)
    sides: dict[str, Callable[[str], dict]] = {"before": lambda q: before(mirror, q),
                                               "after": lambda q: mirror._player("g", "all", q)}
    times: dict[str, list[float]] = {"before": [], "after": []}
    for i in range(a.rounds):
        for side in (("before", "after") if i % 2 else ("after", "before")):
            times[side].append(per_answer_us(sides[side], asked))
    for side, got in times.items():
        print(f"{side}: median {statistics.median(got):.2f} us per answer ({', '.join(f'{t:.1f}' for t in got)})")
    print(f"after / before: {statistics.median(times['after']) / statistics.median(times['before']):.3f}")


if __name__ == "__main__":
    main()
