"""The activity flow's combiner: one watermark, the global top, the changed workspaces.

The merger (``operators.merger``) completes an epoch when every counter partition
reported it; this combiner then

* checks that the partitions agree on the watermark (they compute it from the same
  marks, so a disagreement is a bug: logged and carried in ``errors``);
* merges the partitions' local global tops into the global top ``K_max``: a
  workspace lives in one partition, and a pair missing from its partition's local
  list has ``K_max`` pairs ahead of it there, so the P lists hold the global top;
  or, with ``--global-summary N`` (docs/semantics/windows.md 5), merges the Misra-Gries summaries of
  the window's buckets from every partition into one, whose candidates carry
  ``count_low`` and ``count_high`` (``state.heavy_hitters``);
* passes on the changed workspaces' counts, which the publisher writes into their
  sorted sets in Redis together with the snapshot;
* adds the ``expired`` dead letters, which the counters find, to the cut's counts.
"""

from __future__ import annotations

import logging
from typing import Any

from rankflow.operators.merger import Cut, lag_ms
from rankflow.operators.window_counter import Summary, WindowReport
from rankflow.state.activity_snapshot import ActivitySnapshot
from rankflow.state.heavy_hitters import MisraGries, bounds, merge
from rankflow.state.message_events import EXPIRED
from rankflow.state.ranking_index import COUNT_THEN_ID_DESCENDING, merge_local_tops
from rankflow.state.window_rules import window_buckets

log = logging.getLogger("rankflow.activity")


class ActivityRanking:
    """The running count of expired events and, with ``summary``, the partitions' latest bucket
    summaries; everything else comes with each epoch's reports."""

    def __init__(self, k_max: int, bucket_ms: int, n: int, mode: str, resume: dict[str, Any] | None = None,
                 summary: int = 0) -> None:
        self.k_max, self.bucket_ms, self.n, self.mode, self.summary = k_max, bucket_ms, n, mode, summary
        self.expired = (resume or {}).get("expired", 0)
        # summary mode: bucket -> partition -> (counters, total), and per bucket their merge (a cache)
        self.buckets: dict[int, dict[str, Summary]] = {
            b: dict(parts) for b, parts in (resume or {}).get("buckets", {}).items()}
        self.merged: dict[int, MisraGries] = {}

    def combine(self, cut: Cut, reports: dict[str, WindowReport]) -> ActivitySnapshot:
        errors: list[str] = []
        marks = {r.watermark for r in reports.values()}
        if len(marks) > 1:
            errors.append(f"partitions disagree on the watermark: {sorted(marks, key=str)}")
        watermark = max((m for m in marks if m is not None), default=None)
        full = all(r.full for r in reports.values())
        changed: dict[str, dict[str, int]] = {}
        for r in reports.values():  # a workspace lives in one partition: the dicts are disjoint
            changed.update(r.changed)
        self.expired += sum(len(r.expired) for r in reports.values())
        counts = dict(cut.counts)
        if self.expired:
            counts[f"dead_letters.{EXPIRED}"] = self.expired
        for e in errors:
            log.error("epoch %s: %s", cut.epoch, e)
        return ActivitySnapshot(
            snapshot_id=cut.snapshot_id, run=cut.run, epoch=cut.epoch, positions=cut.positions,
            dead_letters=cut.dead_letters + self.expired, counts=counts, k_max=self.k_max,
            watermark=watermark, bucket_ms=self.bucket_ms, window_buckets=self.n, mode=self.mode,
            items=self._summarized(reports, watermark) if self.summary else
            merge_local_tops((r.top for r in reports.values()), self.k_max, COUNT_THEN_ID_DESCENDING),
            active_pairs=sum(r.pairs for r in reports.values()), changed=changed, full=full,
            partition_lag_ms=lag_ms(cut, reports), errors=errors, summary=self.summary,
        )

    def _summarized(self, reports: dict[str, WindowReport], w: int | None) -> list[Any]:
        """docs/semantics/windows.md 5: the window's candidates from the merged summaries of its buckets, as
        ``((workspace, channel), count_low, count_high)`` in the section's order, the first K_max."""
        for part, r in reports.items():
            for b, summary in r.summaries.items():
                self.buckets.setdefault(b, {})[part] = summary
                self.merged.pop(b, None)
        if w is None:
            return []
        first, last = window_buckets(w, self.bucket_ms, self.n)
        for b in [b for b in self.buckets if b < first]:
            del self.buckets[b]
            self.merged.pop(b, None)
        window = []
        for b, parts in self.buckets.items():
            if b <= last:
                got = self.merged.get(b)
                if got is None:
                    got = self.merged[b] = merge(self.summary, parts.values())
                window.append(got.state())
        candidates = bounds(merge(self.summary, window))
        candidates.sort(key=lambda c: (c[2], c[1], c[0]), reverse=True)
        return candidates[:self.k_max]

    def state(self) -> dict[str, Any]:
        return {"expired": self.expired, "buckets": {b: dict(parts) for b, parts in self.buckets.items()}}
