"""A published state of the activity rankings: what one barrier of the activity flow names.

The snapshot document (JSON, in Redis and in the snapshots stream) says which input
it includes (positions), the watermark and window its counts are over (docs/semantics/windows.md 6),
and the global top ``K_max``. Each workspace's whole ranking is a sorted set in Redis,
written by the same atomic script from :attr:`ActivitySnapshot.changed`, so a
workspace's top and a channel's rank come from the snapshot the document names.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from rankflow.state.snapshot import Gauge, cut_gauges, cut_header, dead_letters_by_reason
from rankflow.state.window_rules import window_bounds


class ActivitySnapshot(NamedTuple):
    """One consistent cut of the message log, ready to publish."""

    snapshot_id: int
    run: int
    epoch: int
    positions: dict[str, int]
    dead_letters: int
    counts: dict[str, int]  # running totals: "dead_letters.<reason>"
    k_max: int
    watermark: int | None
    bucket_ms: int
    window_buckets: int
    mode: str
    items: list[Any]
    """The global top K_max: ``((workspace, channel), count)``, or with a summary
    ``((workspace, channel), count_low, count_high)`` (docs/semantics/windows.md 5)."""
    active_pairs: int
    changed: dict[str, dict[str, int]]
    """To Redis: per workspace whose ranking changed, its channels' counts now (0: gone)."""
    full: bool  # ``changed`` is every count: Redis's rankings are replaced
    partition_lag_ms: dict[str, int]
    errors: list[str]
    summary: int = 0  # ``--global-summary N``; 0: exact

    def to_json_obj(self, published_at_ms: int) -> dict[str, Any]:
        start, end = window_bounds(self.watermark, self.bucket_ms, self.window_buckets)
        return {
            **cut_header(self, published_at_ms),
            "watermark": self.watermark,
            "window_start": start,
            "window_end": end,
            "bucket_ms": self.bucket_ms,
            "window_buckets": self.window_buckets,
            "count": self.mode,
            "dead_letters": self.dead_letters,
            "dead_letters_by_reason": dead_letters_by_reason(self.counts),
            "k_max": self.k_max,
            "active_pairs": self.active_pairs,
            "global_summary": self.summary or None,
            "global": self._global_items(),
            "changed_workspaces": sorted(self.changed),
            "partition_lag_ms": self.partition_lag_ms,
            "errors": self.errors,
        }

    def gauges(self) -> list[Gauge]:
        """What ``--metrics-port`` shows of the activity flow's last snapshot; the watermark
        once there is one (and while it fits a float: event times may be of any size)."""
        gauges = [*cut_gauges(self.snapshot_id, self.partition_lag_ms),
                  Gauge("active_pairs", "(workspace, channel) pairs with a count in the window", self.active_pairs),
                  Gauge("changed_workspaces", "Workspaces whose ranking the last snapshot changed", len(self.changed))]
        if self.watermark is not None and abs(self.watermark) < 10**300:
            gauges.append(Gauge("watermark_seconds", "The last snapshot's watermark (event time)", self.watermark / 1000))
        return gauges

    def _global_items(self) -> list[dict[str, Any]]:
        if self.summary:
            return [{"rank": i, "workspace_id": ws, "channel_id": ch, "count_low": low, "count_high": high}
                    for i, ((ws, ch), low, high) in enumerate(self.items, start=1)]
        return [{"rank": i, "workspace_id": ws, "channel_id": ch, "count": n}
                for i, ((ws, ch), n) in enumerate(self.items, start=1)]
