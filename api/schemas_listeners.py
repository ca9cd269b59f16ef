"""The listener product's part of the OpenAPI contract (``api.schemas``): its answers
(``api.rankings``) and ``POST /events``' body and refusal (``api.ingest``).

The event's schema is the flow's own check (``state.events.validate``, docs/semantics/
listeners.md section 1) written as JSON Schema, so a body the schema accepts is one ingest
accepts: required ids of 1 to ``MAX_ID_CHARS`` characters, a known ``type``, integers at
least 0, ``idle_ms`` at least 1 on a ``TIMEOUT``; other fields are ignored.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rankflow.api.schemas import Exact
from rankflow.state.events import MAX_ID_CHARS


class RankingItem(Exact):
    rank: int = Field(ge=1)
    song_id: str
    listeners: int = Field(ge=1)


class Head(Exact):
    snapshot_id: int = Field(description="the snapshot every item is from")
    published_at: int = Field(description="when the flow published it, ms since the Unix epoch")
    age_ms: int = Field(ge=0, description="its age when answered")
    stale: bool = Field(description="older than the staleness bound (the flow is not publishing)")
    positions: dict[str, int] = Field(description="the input positions the snapshot covers, per partition")


class Ranking(Head):
    """``GET /rankings``: the top k songs by current listeners."""

    total_listeners: int = Field(ge=0)
    items: list[RankingItem]


class RecentItem(Exact):
    rank: int = Field(ge=1)
    song_id: str
    plays: int = Field(ge=1)


class Recent(Head):
    """``GET /rankings/recent``: the top k songs by plays in the window (null bounds before any event)."""

    window_start: int | None
    window_end: int | None
    watermark: int | None
    items: list[RecentItem]


class Song(Exact):
    """``GET /songs/{song_id}``."""

    snapshot_id: int
    song_id: str
    listeners: int = Field(ge=1)
    rank: int = Field(ge=1)


_ID = {"type": "string", "minLength": 1, "maxLength": MAX_ID_CHARS}
_COUNT = {"type": "integer", "minimum": 0}
_EVENT: dict[str, Any] = {
    "type": "object",
    "required": ["user_id", "playback_id", "song_id", "type", "version", "ts"],
    "properties": {"user_id": _ID, "playback_id": _ID, "song_id": _ID,
                   "type": {"enum": ["START", "STOP", "HEARTBEAT", "TIMEOUT"]},
                   "version": _COUNT, "ts": {**_COUNT, "description": "event time, ms since the Unix epoch"}},
    "if": {"properties": {"type": {"const": "TIMEOUT"}}},
    "then": {"required": ["idle_ms"], "properties": {"idle_ms": {"type": "integer", "minimum": 1}}},
    "description": "one playback event (docs/semantics/listeners.md section 1); other fields are ignored",
}
_EXAMPLE = {"user_id": "u42", "playback_id": "pb-7f3a", "song_id": "song_17", "type": "START", "version": 1,
            "ts": 1767225600000}



def events_body(most: int) -> dict[str, Any]:
    """``POST /events``' body (at most ``most`` events) for its ``openapi_extra``: the handler reads
    the bytes itself (they are what is produced), so FastAPI declares no body of its own."""
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"oneOf": [_EVENT, {"type": "array", "items": _EVENT, "minItems": 1, "maxItems": most}]},
        "examples": {
            "one": {"summary": "one event", "value": _EXAMPLE},
            "several": {"summary": "several events", "value": [
                _EXAMPLE, {**_EXAMPLE, "type": "HEARTBEAT", "version": 2, "ts": 1767225630000}]},
        }}}}}


class Problem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    index: int | None = Field(description="the event's index in the array; null for the body as a whole")
    reason: str = Field(description="the flow's dead-letter reason: invalid_json, missing_field, too_many...")
    detail: str


class EventsRefused(Exact):
    """``POST /events``' ``400``: nothing of the request was produced."""

    error: Literal["invalid events; nothing was produced"]
    invalid: list[Problem] = Field(description="every invalid event, with its reason")
