"""``rankflow bench-boards``: the logs it writes, and the exactness of a run's boards."""

from __future__ import annotations

import hashlib
import hmac
import random
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from rankflow.bench.boards.results import DAY_MS, GAME, MEMORY_DAY_MS
from rankflow.state.signatures import canonical_bytes


# -- exactness -----------------------------------------------------------------------
def compare_boards(flow: dict[str, dict[str, list[tuple[str, int, int]]]],
                   reference: dict[str, dict[str, dict[str, int]]]) -> tuple[int, int, int, int, list[str]]:
    """Scores per player per board: (mismatches, boards compared, entries compared, boards
    the reference has that retention dropped from the flow, examples).

    A mismatch is a player whose score differs, or who is on one side only; a board
    on one side only counts its players. The baseline keeps every period until its
    TTL, the flow drops the ones docs/semantics/boards.md 7 no longer keeps: those are counted apart.
    """
    mismatches, boards, entries, dropped = 0, 0, 0, 0
    examples: list[str] = []
    for game in sorted(set(flow) | set(reference)):
        mine, theirs = flow.get(game, {}), reference.get(game, {})
        for board in sorted(set(mine) | set(theirs)):
            got = {player: score for player, score, _ in mine.get(board, [])}
            want = theirs.get(board)
            if want is None:
                mismatches += len(got)
                examples.append(f"{game}/{board}: only in the flow ({len(got)} players)")
                continue
            if board not in mine and board.startswith(("daily:", "weekly:")) and _dropped(board, mine):
                dropped += 1
                continue
            boards += 1
            entries += len(want)
            if got == want:
                continue
            for player in set(got) | set(want):
                if got.get(player) != want.get(player):
                    mismatches += 1
                    if len(examples) < 10:
                        examples.append(f"{game}/{board}/{player}: flow {got.get(player)}, baseline {want.get(player)}")
    return mismatches, boards, entries, dropped, examples


def _dropped(board: str, kept: dict[str, Any]) -> bool:
    """Whether retention (docs/semantics/boards.md 7) drops ``board`` given the periods the flow kept."""
    kind, period = board.split(":", 1)
    newest = max((b.split(":", 1)[1] for b in kept if b.startswith(kind + ":")), default=None)
    if newest is None:
        return False
    if kind == "daily":
        days = (datetime.fromisoformat(newest) - datetime.fromisoformat(period)).days
    else:
        days = (_week_start(newest) - _week_start(period)).days
    return days > 7


def _week_start(week: str) -> datetime:
    return datetime.strptime(week + "-1", "%G-W%V-%u")


# -- logs ----------------------------------------------------------------------------
def one_result_per_player(path: Path, players: int, key: bytes, seed: int, day_ms: int = MEMORY_DAY_MS) -> None:
    """A signed log where each of ``players`` players has one result on game ``arena``, all
    played within one UTC day of one ISO week: every player on exactly 4 boards."""
    rng = random.Random(seed)
    step = max(1, (DAY_MS - 2 * 3_600_000) // max(players, 1))
    digits = max(7, len(str(players - 1)))
    chunk: list[bytes] = []
    with open(path, "wb") as f:
        for i in range(players):
            player = f"p{i:0{digits}d}"
            match = f"m{i}"
            points = rng.randrange(0, 10_001, 5)
            played = day_ms + 3_600_000 + i * step
            sig = hmac.new(key, canonical_bytes(GAME, match, player, points, played), hashlib.sha256).hexdigest()
            chunk.append(orjson.dumps({"game_id": GAME, "match_id": match, "player_id": player, "points": points,
                                       "played_at": played, "received_at": played + 400, "sig": sig}))
            if len(chunk) >= 20_000:
                f.write(b"\n".join(chunk) + b"\n")
                chunk.clear()
        if chunk:
            f.write(b"\n".join(chunk) + b"\n")



def traffic_log(path: Path, n: int, players: int, key: bytes, seed: int) -> None:
    """``n`` signed results of the players of a :func:`one_result_per_player` log, played after
    it on the same day (so none is too old)."""
    rng = random.Random(seed + 7)
    start = MEMORY_DAY_MS + DAY_MS - 3_600_000
    digits = max(7, len(str(players - 1)))
    with open(path, "wb") as f:
        for i in range(n):
            player, match = f"p{rng.randrange(players):0{digits}d}", f"t{i}"
            points, played = rng.randrange(0, 1001, 5), start + i
            sig = hmac.new(key, canonical_bytes(GAME, match, player, points, played), hashlib.sha256).hexdigest()
            f.write(orjson.dumps({"game_id": GAME, "match_id": match, "player_id": player, "points": points,
                                  "played_at": played, "received_at": played + 300, "sig": sig}) + b"\n")
