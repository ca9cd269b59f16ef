"""The boards product's part of the OpenAPI contract (``api.schemas``): its answers
(``api.boards``, ``api.board_stream``), the board-name pattern the routes enforce
(``connectors.board_read.check_board``), and ``POST /matches/{match_id}/result``'s body and
refusal (``api.match_results``).

A result's schema is the flow's checks 1 to 6 (``state.score_events``, docs/semantics/
boards.md section 1) written as JSON Schema, for a service with a signing key. What no
static schema can say is in its description: ``sig`` must be the result's signature (a
service without a key ignores it), ``played_at`` may not be more than 60 s after the
request's arrival, and a ``match_id`` in the body must be the path's.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from rankflow.api.schemas import Exact
from rankflow.connectors.board_read import BOARD_PATTERN
from rankflow.state.score_events import MAX_ID_CHARS, MAX_POINTS, MAX_TIME

BOARD = f"^{BOARD_PATTERN.pattern}$"
"""A board name or alias, as the routes check it (else ``400``)."""

class Stamp(Exact):
    snapshot_id: int | None = Field(description="the boards snapshot the answer is from")
    published_at: int | None = Field(description="when the flow published it, ms since the Unix epoch")
    age_ms: int | None = Field(ge=0, description="its age when answered")
    stale: bool = Field(description="older than the service's staleness bound (--stale-after-ms): the flow is "
                                    "not publishing")


RANK_CHANGE = ("with a run of rankflow run --flow boards --rank-change: the positions gained since the previous "
               "snapshot that changed this board (negative: lost), in the board's own order; absent for an entry "
               "new since then, and from every answer without the option (docs/semantics/boards.md 5.5)")


SINCE_ID = ("with since: the snapshot every rank_change counts from (the board as it was there), null for the "
            "day start of the first snapshot (docs/semantics/boards.md 5.6); absent without since")


class Entry(Exact):
    rank: int = Field(ge=1, description="1, 2, 3...: ties broken by who reached the score first; with ties=S the "
                                        "S-style rank (docs/semantics/boards.md 5.3)")
    competition_rank: int = Field(ge=1, description="1, 1, 3...: equal scores share a rank")
    player_id: str
    score: int
    rank_change: int | None = Field(None, description=RANK_CHANGE)


class Top(Stamp):
    """``GET /boards/{game}/{board}/top``: the first n entries (an alias resolved in ``board``)."""

    game_id: str
    board: str = Field(description="the concrete board: an alias is resolved")
    total_players: int = Field(ge=0)
    items: list[Entry]
    next: str | None = Field(None, description="with after: the cursor of the page after this one, absent on the "
                                               "last page (docs/semantics/boards.md 5.1)")
    since_snapshot_id: int | None = Field(None, description=SINCE_ID)


class PlayerRank(Stamp):
    """``GET /boards/{game}/{board}/players/{player_id}``."""

    game_id: str
    board: str
    player_id: str
    score: int
    rank: int = Field(ge=1)
    competition_rank: int = Field(ge=1)
    percentile: float = Field(ge=0, le=100, description="100 * (entries - rank) / entries, rounded half-even to two "
                                                        "decimals (docs/semantics/boards.md 5.2)")
    rank_change: int | None = Field(None, description=RANK_CHANGE)
    since_snapshot_id: int | None = Field(None, description=SINCE_ID)


class Around(Stamp):
    """``GET /boards/{game}/{board}/players/{player_id}/around``: r above to r below, fewer near the ends."""

    game_id: str
    board: str
    items: list[Entry]
    since_snapshot_id: int | None = Field(None, description=SINCE_ID)


class PlayerPage(Stamp):
    """``GET /boards/{game}/{board}/players/{player_id}/page``: the page of n the player is on."""

    game_id: str
    board: str
    player_id: str
    page: int = Field(ge=1, description="1 for ranks 1..n, 2 for n+1..2n...")
    total_players: int = Field(ge=0)
    items: list[Entry]
    next: str | None = Field(None, description="the cursor of the page after this one, absent on the last page")
    since_snapshot_id: int | None = Field(None, description=SINCE_ID)


class ScoreForPercentile(Stamp):
    """``GET /boards/{game}/{board}/score-for-percentile``: the least score at percentile p or above."""

    game_id: str
    board: str
    total_players: int = Field(ge=1)
    percentile: float = Field(ge=0, le=100, description="p, as asked")
    score: int | None = Field(description="the least score among the entries at percentile p or above; null when "
                                          "no entry is")

class SetEntry(Entry):
    rank_in_set: int = Field(ge=1, description="1, 2, 3...: the place among the players asked for who are on the "
                                               "board, in board order")


class Ranks(Stamp):
    """``POST /boards/{game}/{board}/ranks``: the players asked for, in board order, and those not on it."""

    game_id: str
    board: str = Field(description="the concrete board: an alias is resolved")
    total_players: int = Field(ge=0)
    items: list[SetEntry] = Field(description="the players asked for who are on the board, in board order "
                                              "(each once)")
    absent: list[str] = Field(description="the players asked for who are not on the board, in the order asked")
    since_snapshot_id: int | None = Field(None, description=SINCE_ID)


def ranks_body(most: int) -> dict[str, Any]:
    """``POST /boards/{game}/{board}/ranks``'s body for its ``openapi_extra``: the handler reads the bytes
    itself, so that a body that is not JSON, too long a list or a bad id is its clear ``400``."""
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"type": "object", "required": ["players"], "properties": {"players": {
            "type": "array", "maxItems": most, "items": _ID,
            "description": f"at most {most} player ids (a friends list, a clan); a repeated one is answered once"}}},
        "examples": {"friends": {"summary": "a player's friends", "value": {"players": ["p000042", "p000007"]}}},
    }}}}


class Aliases(Exact):
    daily: str | None = Field(description="the newest daily board, or null")
    weekly: str | None = Field(description="the newest weekly board, or null")


class GameBoards(Exact):
    boards: list[str] = Field(description="all and best first, then the periods newest first; then each group's "
                                          "boards (a run with --group-by), named BOARD@FIELD=VALUE")
    aliases: Aliases
    groups: dict[str, Aliases] | None = Field(
        None, description="with group boards only: per group (FIELD=VALUE) its own aliases daily@FIELD=VALUE and "
                          "weekly@FIELD=VALUE, the group's newest periods", examples=[{"region=eu": {
                              "daily": "daily:2027-01-04@region=eu", "weekly": "weekly:2027-W01@region=eu"}}])


class BoardList(Exact):
    """``GET /boards``: every game's boards and aliases."""

    snapshot_id: int | None
    games: dict[str, GameBoards]


class Final(Exact):
    game_id: str
    board: str = Field(description="final: and the period's board: read it like a board by this name")
    closed_by: int = Field(description="the snapshot that closed the period: the final is the board as it left it")
    players: int


class FinalList(Exact):
    """``GET /boards/{game}/finals``: the final standings of the periods retention dropped
    (docs/semantics/boards.md 9), the newest closed first."""

    snapshot_id: int
    finals: list[Final]


_ID = {"type": "string", "minLength": 1, "maxLength": MAX_ID_CHARS}
_RESULT: dict[str, Any] = {
    "type": "object",
    "required": ["game_id", "player_id", "points", "played_at", "sig"],
    "properties": {
        "game_id": _ID, "player_id": _ID,
        "points": {"type": "integer", "minimum": 0, "maximum": MAX_POINTS},
        "played_at": {"type": "integer", "minimum": 0, "maximum": MAX_TIME,
                      "description": "ms since the Unix epoch; at most 60 s after the request arrives "
                                     "(else 400 in_future)"},
        "sig": {"type": "string", "pattern": "^[0-9a-f]{64}$",
                "description": "lowercase hex HMAC-SHA256 of the result (docs/semantics/boards.md section 1) under "
                               "the service's signing key (--signing-key); a service without one ignores it"},
        "match_id": {**_ID, "description": "optional: the path's match_id (another is 400 match_id_mismatch)"},
    },
    "description": "one signed match result (docs/semantics/boards.md section 1); received_at is stamped by the "
                   "service, other fields are ignored",
}
_EXAMPLE = {"game_id": "arena", "player_id": "p000042", "points": 120, "played_at": 1767225600000,
            "sig": "9f2c0d3e5b1a47c8a6e4f0b2d8c91e3f7a5b6c4d2e1f0a9b8c7d6e5f4a3b2c1d"}



def results_body(most: int) -> dict[str, Any]:
    """``POST /matches/{match_id}/result``'s body (at most ``most`` results) for its ``openapi_extra``:
    the handler reads the bytes itself (they are what is produced, stamped), so FastAPI declares
    no body of its own."""
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"oneOf": [_RESULT, {"type": "array", "items": _RESULT, "minItems": 1, "maxItems": most}]},
        "examples": {
            "one": {"summary": "one player's result", "value": _EXAMPLE},
            "match": {"summary": "the players of one match", "value": [
                _EXAMPLE, {**_EXAMPLE, "player_id": "p000043", "points": 80,
                           "sig": "0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c"}]},
        }}}}}


class ResultRefused(Exact):
    """``POST /matches/{match_id}/result``'s ``400``: the first bad result; nothing was produced."""

    error: Literal["invalid result; nothing was produced"]
    index: int | None = Field(description="the result's index in the array; null for the body as a whole")
    reason: str = Field(description="the flow's reason: invalid_json, missing_field, out_of_range, bad_signature, "
                                    "in_future, match_id_mismatch, too_many...")
    detail: str
