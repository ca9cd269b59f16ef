"""docs/semantics/boards.md section 8, the worked example, as a log and its expected boards.

Shared by the model's tests and the rules' tests so both are held to the same text.
"""

from __future__ import annotations

import datetime
import json
import uuid
from pathlib import Path

from tests.boards_model import signature

KEY = bytes.fromhex("5eed" * 16)
PARTITION = "scores.jsonl"


def ms(text: str) -> int:
    """A UTC time as ms since the epoch: ``ms("2027-01-02 10:00:00.000")``."""
    return (datetime.datetime.fromisoformat(text) - datetime.datetime(1970, 1, 1)) // datetime.timedelta(milliseconds=1)


def result(player: str, match: str, points: int, played_at: int, received_at: int, *,
           game: str = "g1", signed_points: int | None = None, key: bytes = KEY) -> bytes:
    """One score event line, signed (for ``signed_points`` if given: a forged result)."""
    sig = signature(key, game, match, player, points if signed_points is None else signed_points, played_at)
    return json.dumps({"game_id": game, "match_id": match, "player_id": player, "points": points,
                       "played_at": played_at, "received_at": received_at, "sig": sig}).encode()


S = 1000
_ANA = ms("2027-01-02 10:00:00.000")
_BO = ms("2027-01-02 11:00:00.000")
_BO_LATE = ms("2027-01-03 23:59:59.999")
_CY = ms("2027-01-04 09:00:00.000")
_EVE = ms("2027-01-04 12:00:00.000")
_EVE_FORGED = ms("2027-01-04 13:00:00.000")

LINES = [
    result("ana", "m1", 50, _ANA, _ANA + 2 * S),
    result("bo", "m2", 30, _BO, _BO + 1 * S),
    result("ana", "m1", 50, _ANA, _ANA + 9 * S),
    result("bo", "m3", 20, _BO_LATE, ms("2027-01-04 00:00:03.000")),
    result("cy", "m4", 50, _CY, _CY + 1 * S),
    result("dee", "m4", 50, _CY, _CY + 1 * S),
    result("ana", "m1", 80, _ANA, _ANA + 40 * S),
    result("eve", "m5", 0, _EVE, _EVE + 1 * S),
    result("eve", "m6", 900, _EVE_FORGED, _EVE_FORGED + 1 * S, signed_points=90),
]

OUTCOMES = ["accepted", "accepted", "duplicate", "accepted", "accepted", "accepted", "conflict", "accepted",
            "bad_signature"]

# (player, score, rank, competition_rank) per board, in order, as section 8 lists them.
BOARDS = {
    "all": [("ana", 50, 1, 1), ("bo", 50, 2, 1), ("cy", 50, 3, 1), ("dee", 50, 4, 1), ("eve", 0, 5, 5)],
    "best": [("ana", 50, 1, 1), ("cy", 50, 2, 1), ("dee", 50, 3, 1), ("bo", 30, 4, 4), ("eve", 0, 5, 5)],
    "weekly:2026-W53": [("ana", 50, 1, 1), ("bo", 50, 2, 1)],
    "weekly:2027-W01": [("cy", 50, 1, 1), ("dee", 50, 2, 1), ("eve", 0, 3, 3)],
    "daily:2027-01-02": [("ana", 50, 1, 1), ("bo", 30, 2, 2)],
    "daily:2027-01-03": [("bo", 20, 1, 1)],
    "daily:2027-01-04": [("cy", 50, 1, 1), ("dee", 50, 2, 1), ("eve", 0, 3, 3)],
}
ALIASES = {"daily": "daily:2027-01-04", "weekly": "weekly:2027-W01"}

# reached_at on all, as section 8 explains the order of the four 50s
REACHED_ON_ALL = {"ana": _ANA, "bo": _BO_LATE, "cy": _CY, "dee": _CY, "eve": _EVE}


def publish_boards(redis_url: str, tmp: Path, lines: list[bytes]) -> str:
    """``lines`` run through the boards flow to their end into a new namespace, returned."""
    from rankflow.options import RunOptions
    from rankflow.runner import run

    path = tmp / "scores.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    namespace = f"b-{uuid.uuid4().hex[:10]}"
    assert run(RunOptions(input=f"jsonl:{path}", until_eof=True, redis_url=redis_url, namespace=namespace,
                          dead_letter=f"jsonl:{tmp / 'dead.jsonl'}", flow="boards", signing_key=KEY))
    return namespace
