"""The activity flow's counter table: each partition's workspaces, counted over the window.

Contract (the counter stage of ``operators.counter``, keyed by counter partition
``"0"`` .. ``"P-1"``; a workspace's events all go to partition ``crc32(workspace) % P``):

* **Input**: ``(epoch, WindowBatch)`` items from :func:`route_messages`, exactly one per
  source batch per partition: the batch's events of this partition's workspaces
  (often none) and the batch's :class:`state.window_rules.SourceMark`. Every partition
  sees every mark, so every partition computes the same watermark.
* **State**: a :class:`state.window_rules.Watermark`, a
  :class:`state.window_rules.WindowCounts` over ``(workspace, channel)`` keys, and the
  ordered index of the partition's pairs (``state.ranking_index.SongIndex``: a count
  map beside a balanced tree, in the global order of WINDOWS.md 4) for its local
  top. A workspace's own order is its sorted set's in Redis. The open epoch's batches wait here:
  an event is judged only once its barrier's marks are all in.
* **Output**: when epoch ``e`` closes, one :class:`WindowReport`: the watermark after
  ``e``, each changed workspace's channel counts (0: gone; Redis holds the whole
  rankings, so exact ranks come from there), the partition's global top ``K_max``, and the events found ``expired`` (dead letters).
  An execution's first report is ``full``: every count, so that a resumed run's
  first snapshot replaces whatever Redis held.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Iterable
from typing import Any, NamedTuple

from rankflow.state.events import DeadLetter
from rankflow.state.heavy_hitters import MisraGries
from rankflow.state.ranking_index import SongIndex
from rankflow.state.window_rules import EXPIRED, SourceMark, Watermark, WindowCounts, window_buckets

log = logging.getLogger("rankflow.activity")

Pair = tuple[str, str]  # (workspace_id, channel_id)
WindowEvent = tuple[str, str, str, int, int, int, bytes]
"""``(workspace_id, channel_id, user_id, ts, seen, offset, raw)``: ``seen`` is the greatest
valid ``ts`` of its source batch up to and including this event."""


class WindowBatch(NamedTuple):
    """One source batch's events for one counter partition, and the batch's mark."""

    mark: SourceMark
    events: list[WindowEvent]


class WindowReport(NamedTuple):
    """A counter partition's changes at the close of ``epoch``."""

    epoch: int
    watermark: int | None
    changed: dict[str, dict[str, int]]  # workspace -> channel -> count now (0: gone); every count when ``full``
    top: list[tuple[Pair, int]]  # the partition's global top K_max
    pairs: int  # pairs with a count here
    expired: list[DeadLetter]
    full: bool
    closed_at: float
    summaries: dict[int, tuple[dict[Pair, int], int]] = {}
    """``--global-summary``: per bucket that changed (every bucket when ``full``) its summary here."""


def workspace_partition(workspace: str, partitions: int) -> int:
    return zlib.crc32(workspace.encode("utf-8", "surrogatepass")) % partitions


def route_messages(parsed: Any, partitions: int, quiet_after_s: float | None) -> list[tuple[str, tuple[int, WindowBatch]]]:
    """A parsed batch's events, per counter partition, each with the batch's running greatest
    ``ts``; every partition gets the batch's mark. ``quiet_after_s``: a batch without
    records this long after the partition's last records marks it idle (None: never)."""
    groups: list[list[WindowEvent]] = [[] for _ in range(partitions)]
    seen = -1
    crc = zlib.crc32
    for ws, ch, user, ts, offset, raw in parsed.events:
        if ts > seen:
            seen = ts
        groups[crc(ws.encode("utf-8", "surrogatepass")) % partitions].append((ws, ch, user, ts, seen, offset, raw))
    quiet = quiet_after_s is not None and parsed.quiet_s >= quiet_after_s
    mark = SourceMark(parsed.partition, parsed.start, seen if seen >= 0 else None, quiet)
    epoch = parsed.epoch
    return [(str(p), (epoch, WindowBatch(mark, events))) for p, events in enumerate(groups)]


class WindowTable:
    """One counter partition of the activity flow (see the module docstring)."""

    def __init__(self, bucket_ms: int, n: int, mode: str, k_max: int, resume: dict[str, Any] | None = None,
                 summary: int = 0) -> None:
        s = resume or {}
        self.bucket_ms, self.n, self.k_max, self.summary = bucket_ms, n, k_max, summary
        # ``summary`` > 0: per bucket a Misra-Gries summary of that many counters (WINDOWS.md 5)
        self.summaries = {b: MisraGries(summary, *st) for b, st in s.get("summaries", {}).items()}
        self.touched: set[int] = set()  # buckets whose summary changed in the open epoch
        self.watermark = Watermark(s.get("watermark"))
        self.counts = WindowCounts(bucket_ms, n, mode, s.get("counts"))
        self.staged: list[WindowBatch] = list(s.get("staged", ()))
        self.pairs = SongIndex(self.counts.counts)  # the global order over this partition's pairs
        self.full = True  # an execution's first report carries every count

    def stage(self, batch: WindowBatch) -> None:
        self.staged.append(batch)

    def close(self, epoch: int) -> WindowReport:
        staged, self.staged = self.staged, []
        staged.sort(key=lambda b: (b.mark.partition, b.mark.start))
        wm = self.watermark
        before = dict(wm.maxima)
        w = wm.advance(b.mark for b in staged)
        expired = self._place(staged, before, epoch)
        if w is not None:
            self.counts.move_to(w)
            self._forget_summaries()
        moved = self.counts.take_changed()
        self.pairs.set_counts(moved)
        full, self.full = self.full, False
        changed = by_workspace(self.counts.counts if full else moved)
        touched = set(self.summaries) if full else self.touched & set(self.summaries)
        self.touched = set()
        return WindowReport(epoch, w, changed, self.pairs.top(self.k_max), self.pairs.active_songs,
                            expired, full, time.time(), {b: self.summaries[b].state() for b in touched})

    def _forget_summaries(self) -> None:
        """Summaries of buckets before the window: they never count again."""
        first = self.counts.first
        for b in [b for b in self.summaries if b < first]:  # type: ignore[operator]
            del self.summaries[b]

    def _place(self, staged: list[WindowBatch], before: dict[str, int], epoch: int) -> list[DeadLetter]:
        """Judge each staged event by its watermark; count what is not expired."""
        wm, counts, bucket_ms, n = self.watermark, self.counts, self.bucket_ms, self.n
        expired: list[DeadLetter] = []
        for batch in staged:
            mark = batch.mark
            prior = before.get(mark.partition, -1)
            for ws, ch, user, ts, seen, offset, raw in batch.events:
                w = wm.event_watermark(mark.partition, seen if seen > prior else prior)
                first, _ = window_buckets(w, bucket_ms, n)
                b = ts // bucket_ms
                if b < first:
                    expired.append(DeadLetter(EXPIRED, _expired_detail(ts, w, first * bucket_ms), mark.partition,
                                              offset, raw, epoch))
                else:
                    counts.add((ws, ch), user, b)
                    if self.summary:
                        self._summarize((ws, ch), b)
            if mark.max_ts is not None and mark.max_ts > prior:
                before[mark.partition] = mark.max_ts
        return expired

    def _summarize(self, pair: Pair, b: int) -> None:
        summary = self.summaries.get(b)
        if summary is None:
            summary = self.summaries[b] = MisraGries(self.summary)
        summary.add(pair)
        self.touched.add(b)

    def state(self) -> dict[str, Any]:
        return {"watermark": self.watermark.state(), "counts": self.counts.state(), "staged": list(self.staged),
                "summaries": {b: m.state() for b, m in self.summaries.items()}}


def by_workspace(counts: dict[Pair, int]) -> dict[str, dict[str, int]]:
    """Pair counts grouped by workspace, as Redis keeps them."""
    out: dict[str, dict[str, int]] = {}
    for (ws, ch), count in counts.items():
        mine = out.get(ws)
        if mine is None:
            mine = out[ws] = {}
        mine[ch] = count
    return out


def _expired_detail(ts: int, w: int, start: int) -> str:
    return (f"ts {ts} is before the window [{start}, ...) of watermark {w}: it can never count")


def expired_dead_letters(item: tuple[str, WindowReport]) -> Iterable[tuple[str, DeadLetter]]:
    """The dead-letter output's share of a report: its expired events."""
    _, report = item
    return [(d.partition, d) for d in report.expired]
