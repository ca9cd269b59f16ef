"""The activity product's part of the OpenAPI contract (``api.schemas``): the answers of
``api.activity``, as ``connectors.activity_read`` gives them. A window's bounds and the
watermark are null before the first event, and may be integers beyond 64 bits (JSON has
no limit, docs/semantics/windows.md 1 sets none).
"""

from __future__ import annotations

from pydantic import Field

from rankflow.api.schemas import Exact


class Window(Exact):
    snapshot_id: int = Field(description="the activity snapshot the answer is from")
    published_at: int | None = Field(description="when the flow published it, ms since the Unix epoch")
    age_ms: int | None = Field(ge=0, description="its age when answered")
    stale: bool = Field(description="older than the service's staleness bound (--stale-after-ms): the flow is "
                                    "not publishing")


class Bounds(Window):
    window_start: int | None = Field(description="the window's first ms (inclusive)")
    window_end: int | None = Field(description="the window's end (exclusive)")
    watermark: int | None


class ChannelItem(Exact):
    rank: int = Field(ge=1)
    channel_id: str
    count: int = Field(ge=1)


class WorkspaceTop(Window):
    """``GET /activity/{workspace}/top`` and ``GET /activity/top?workspace=``: ``items: []`` when the
    workspace has no count."""

    workspace_id: str
    window_start: int | None
    window_end: int | None
    watermark: int | None
    items: list[ChannelItem]


class GlobalItem(Exact):
    """``count``, or with the flow's ``--global-summary`` its bounds ``count_low`` and ``count_high``."""

    rank: int = Field(ge=1)
    workspace_id: str
    channel_id: str
    count: int | None = Field(None, ge=1)
    count_low: int | None = Field(None, ge=0)
    count_high: int | None = Field(None, ge=1)


class GlobalTop(Bounds):
    """``GET /activity/global/top``: the most active channels across workspaces."""

    items: list[GlobalItem]


class ChannelCount(Window):
    """``GET /activity/{workspace}/channels/{channel}`` and ``GET /activity/channel``: the rank in its
    workspace."""

    workspace_id: str
    channel_id: str
    count: int = Field(ge=1)
    rank: int = Field(ge=1)


class Current(Exact):
    """``GET /activity``: the current snapshot; ``now`` is the server's clock (ms), the lags null
    without a watermark."""

    snapshot_id: int
    published_at: int | None
    age_ms: int | None = Field(ge=0, description="now - published_at")
    stale: bool = Field(description="older than the service's staleness bound (--stale-after-ms)")
    watermark: int | None
    window_start: int | None
    window_end: int | None
    bucket_ms: int | None = Field(ge=1)
    window_buckets: int | None = Field(ge=1)
    count: str | None = Field(description="what is counted: messages or users")
    k_max: int | None = Field(ge=1, description="the largest k the rankings answer")
    active_pairs: int | None = Field(ge=0)
    now: int
    watermark_lag_ms: int | None = Field(description="now - watermark")
    published_lag_ms: int | None = Field(description="published_at - watermark")
