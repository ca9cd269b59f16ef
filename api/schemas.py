"""The OpenAPI contract's shared parts: the answers every product's routes share (errors,
``/health``, the probes, an ingest route's ``202``) as pydantic models, and the helpers
that put models, bounds and patterns into a route's schema.

The models are for ``/openapi.json`` only: every handler returns a ready ``Response``
(pre-serialized bytes; ``api.prepared`` answers never reach FastAPI), and FastAPI runs no
validation on a ``Response`` returned as is, so describing an answer costs no request
anything. A product's own answers are in its ``api.schemas_*`` module. ``tests/api/
test_openapi_contract.py`` holds the service to them: schemathesis, every check, against
a real server over what the three flows published.

Bounds and patterns (:func:`bounded`) go into the schema only, never into FastAPI's
validation: the routes check their parameters themselves (``api.responses``: a usage error
is ``400 {"error"}`` with the route's own message), and the schema says what they check.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Exact(BaseModel):
    """An answer whose fields are all listed: any other field is a contract change."""

    model_config = ConfigDict(extra="forbid")


class Error(Exact):
    """Every refusal of a reading route, and ingest's (``api.responses.error_response``)."""

    error: str = Field(description="what is wrong, in one line")


class Unavailable(BaseModel):
    """A reading route's ``503``: no usable snapshot, or Redis unreachable. When this process
    kept the last answer it had (the listeners' table, the boards' ``--board-index memory``
    copy), that answer's fields come too, marked ``"stale": true``."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"additionalProperties": True})
    error: str = Field(description="why there is no answer: 'no usable ...' or 'cannot read ... from Redis'")
    stale: bool | None = Field(None, description="true when the last answer this process had comes with the error")


class BoardMirror(Exact):
    ready: bool = Field(description="whether the in-process copy serves (until then Redis answers)")
    problem: str | None
    snapshot_id: int | None


class Health(Exact):
    """``GET /health``: the fields of the products not mounted are left out."""

    status: Literal["ok", "degraded"]
    redis: Literal["ok", "unreachable"] = Field(description="whether the endpoint the readers read answers")
    snapshot_id: int | None = Field(None, description="the listener ranking's snapshot (listeners mounted)")
    snapshot_age_ms: int | None = Field(None, description="its age; over the staleness bound the service is degraded")
    problem: str | None = Field(None, description="why the listener ranking is not current, if it is not")
    boards_snapshot_id: int | None = Field(None, description="the boards' snapshot (boards mounted)")
    board_index: Literal["redis", "memory"] | None = Field(None, description="where board queries are answered")
    activity_snapshot_id: int | None = Field(None, description="the activity rankings' snapshot (activity mounted)")
    board_mirror: BoardMirror | None = Field(None, description="with --board-index memory: the copy's state")


class Live(Exact):
    status: Literal["live"]


class Ready(Exact):
    """``GET /readyz``: ``reason`` only when not ready."""

    status: Literal["ready", "not ready"]
    reason: str | None = Field(None, description="every reason in one line, when not ready")
    redis: Literal["ok", "unreachable"]
    products: dict[str, str] = Field(description="each product mounted: 'ready', or why not")


class Position(Exact):
    partition: str = Field(description="topic/partition")
    offset: int = Field(ge=0)


class Accepted(Exact):
    """An ingest route's ``202``: the broker acknowledged every record."""

    accepted: int = Field(ge=1, description="records produced")
    positions: list[Position] = Field(description="where each record is, in the request's order")


Responses = dict[int | str, dict[str, Any]]
"""A route's ``responses``, as FastAPI takes them."""


def model(cls: type[BaseModel], description: str, **extra: Any) -> dict[str, Any]:
    """One ``responses`` entry: ``description`` and the body's schema, ``cls``."""
    return {"model": cls, "description": description, **extra}


def text(media_type: str, description: str) -> dict[str, Any]:
    """One ``responses`` entry whose body is text of ``media_type`` (an event stream, metrics)."""
    return {"description": description, "content": {media_type: {"schema": {"type": "string"}}}}


def bounded(**schema: Any) -> dict[str, Any]:
    """Keywords of ``Query``/``Path`` that put ``schema`` (``minimum``, ``maximum``, ``pattern``,
    ``minLength``...) into the parameter's OpenAPI and leave its checks to the route."""
    return {"json_schema_extra": schema}
