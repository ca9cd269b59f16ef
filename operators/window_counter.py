"""The activity flow's counter table: each partition's workspaces, counted over the window.

Contract (the counter stage of ``operators.counter``, keyed by counter partition
``"0"`` .. ``"P-1"``; a workspace's events all go to partition ``crc32(workspace) % P``,
so each workspace's counts are exact in one place):

* **Input**: :class:`WindowBatch` items from :func:`route_messages`, exactly one per
  source batch per partition (each is its batch's barrier tick too): the batch's events
  of this partition's workspaces (often none), as the kernel routed them in the parse
  step (:class:`MessageParser`: one by one, or the events on time within their batch
  summed per bucket and pair and the others one by one), and the batch's
  :class:`state.window_rules.SourceMark`. Every partition sees every mark, so every
  partition computes the same watermark.
* **State**: a :class:`state.window_rules.Watermark`, a
  :class:`state.window_rules.WindowCounts` over ``(workspace, channel)`` keys, and the
  partition's best ``K_max`` pairs in the global order of docs/semantics/windows.md 4
  (``state.ranking_index.RetakenTop``: only the top is kept sorted; counts fall only when
  a bucket leaves the window, and then it is taken again from the counts, so a change
  below the top costs one comparison, not an update of an index of every pair, which
  was 27% of the flow's CPU). A workspace's own order is its sorted set's in Redis.
* **Judging an event** (docs/semantics/windows.md 2) as it arrives: its watermark lies between the
  window's at the last barrier and its own partition's greatest ``ts`` so far
  (``seen``). So a bucket before the current window is ``expired`` at once, a bucket
  within ``seen``'s window counts at once, and only a bucket between the two (an
  event late by more than the window, within its partition) waits for the barrier's
  marks to be judged by :meth:`state.window_rules.Watermark.event_watermark`.
  A summed part whose least bucket is in or after the window and within the window of
  its source partition's greatest ``ts`` so far counts per pair at once (each of its
  events would count), and its late events are judged one by one; any other part is
  judged event by event.
* **Output**: when epoch ``e`` closes, one :class:`WindowReport`: the watermark after
  ``e``, each changed workspace's channel counts (0: gone; Redis holds the whole
  rankings, so exact ranks come from there), the partition's global top ``K_max``, and
  the events found ``expired`` (dead letters). An execution's first report is
  ``full``: every count, so that a resumed run's first snapshot replaces whatever
  Redis held.
* **Recovery**: with a changelog directory, the buckets go to a changelog
  (``connectors.changelog``): each barrier appends what changed in it, so a barrier
  costs its changes, not the window; Bytewax keeps the changelog's position and the
  small rest. A worker's partitions sync their frames of a barrier together
  (``connectors.barrier_sync``). Without one, the whole table is Bytewax's state.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Hashable
from pathlib import Path
from typing import Any, NamedTuple, cast

from rankflow import _native
from rankflow.connectors.barrier_sync import BarrierSync
from rankflow.connectors.changelog import ShardChangelog
from rankflow.operators.engine_types import SourceMark
from rankflow.operators.parse import ParsedBatch
from rankflow.state.events import DeadLetter
from rankflow.state.heavy_hitters import MisraGries
from rankflow.state.message_events import EXPIRED, exact_ts
from rankflow.state.ranking_index import RetakenTop
from rankflow.state.window_rules import USERS, Watermark, WindowCounts, window_buckets

log = logging.getLogger("rankflow.activity")

Pair = tuple[str, str]  # (workspace_id, channel_id)
Summary = tuple[dict[Hashable, int], int]  # a bucket's Misra-Gries counters (pairs) in one partition, and its total
WindowEvent = tuple[str, str, str, int, int, int, bytes]
"""``(workspace_id, channel_id, user_id, ts, seen, offset, raw)``: ``seen`` is the greatest
valid ``ts`` of its source batch up to and including this event."""


WINDOW_FORMAT = "rankflow-window/1"
"""The version of a partition's stored state (:meth:`WindowTable.state`, a dict of named fields:
its counts, or its changelog position with ``"changelog"``). State stored before it carried one
has the same fields and is read as this version; another version is refused, never guessed."""


class WindowBatch(NamedTuple):
    """One source batch's events for one counter partition, and the batch's mark (an
    ``operators.engine_types.PartitionBatch``)."""

    epoch: int
    mark: SourceMark
    events: WindowPart
    part: int = 0  # the counter partition it is for (names the partition's changelog)


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
    summaries: dict[int, Summary] = {}
    """``--global-summary``: per bucket that changed (every bucket when ``full``) its summary here."""


class WindowPart(NamedTuple):
    """One counter partition's share of a source batch, as the kernel routes it
    (``_native.MessageRouter.route``): its events one by one, or summed."""

    events: list[WindowEvent] | None
    """The events one by one (None: summed)."""
    counts: dict[int, dict[Pair, int]] | None
    """Summed: per bucket each pair's number of events, over the events on time within their
    batch (no bucket before the window of their ``seen``); every ``ts`` within 64 bits."""
    late: list[WindowEvent]
    """Summed: the other events, one by one (late by more than the window in their batch)."""
    raws: list[bytes]
    """Summed: every event's record, and in ``packed`` their offsets and ``seen``, from which
    the kernel makes them one by one again (:meth:`WindowTable.stage`'s rare path)."""
    packed: bytes
    seen: int | None
    """The source batch's greatest valid ``ts`` (None: it has none)."""


class MessageParser:
    """The activity flow's parse step (a ``operators.parse.Parser``): checks 1 to 3 and the
    routing to the counter partitions in one call into the kernel per batch. Its "events"
    are the batch's :class:`WindowPart` per counter partition, in order.

    ``per_event``: every part one by one (mode ``users`` and a global summary need each
    event); otherwise a part's events on time within their batch are summed per bucket and
    pair, the others listed one by one.
    """

    def __init__(self, partitions: int, bucket_ms: int, n: int, per_event: bool) -> None:
        self.router = _native.MessageRouter(partitions, bucket_ms, n, not per_event)

    def __call__(self, records: list[bytes], offsets: range | list[int], partition: str, epoch: int
                 ) -> tuple[list[WindowPart], list[tuple[str, DeadLetter]]]:
        if type(offsets) is range and offsets.step == 1:
            parts, seen, refused = self.router.route(records, offsets.start)
        else:
            parts, seen, refused = self.router.route(records, 0, list(offsets))
        seen = None if seen is None else exact_ts(seen)
        out = [WindowPart(events if events is None else _exact_events(events), counts, late, raws, packed, seen)
               for events, counts, late, raws, packed in parts]
        dead = [(partition, DeadLetter(reason, detail, partition, offsets[i], records[i], epoch))
                for i, reason, detail in refused]
        return out, dead



_UNSUMMING = _native.MessageRouter(1, 1, 1, False)  # its ``events`` knows no partitions or window


def part_events(part: WindowPart) -> list[WindowEvent]:
    """A part's events one by one, in input order."""
    if part.events is not None:
        return part.events
    return _UNSUMMING.events(part.raws, part.packed)


def _exact_events(events: list[Any]) -> list[WindowEvent]:
    """The kernel's events with ``ts`` and ``seen`` exact (a literal beyond 64 bits comes as text)."""
    for i, e in enumerate(events):
        if type(e[3]) is not int or type(e[4]) is not int:
            events[i] = (e[0], e[1], e[2], exact_ts(e[3]), exact_ts(e[4]), e[5], e[6])
    return cast("list[WindowEvent]", events)


def route_messages(parsed: ParsedBatch, partitions: int, quiet_after_s: float | None
                   ) -> list[tuple[str, WindowBatch]]:
    """A parsed batch's parts (:class:`MessageParser`), one per counter partition, each with
    the batch's mark. ``quiet_after_s``: a batch without records this long after the
    partition's last records marks it idle (None: never)."""
    parts = cast("list[WindowPart]", parsed.events)
    if len(parts) != partitions:
        raise RuntimeError(f"a batch routed to {len(parts)} counter partitions, not {partitions}")
    quiet = quiet_after_s is not None and parsed.quiet_s >= quiet_after_s
    mark = SourceMark(parsed.partition, parsed.start, parts[0].seen if parts else None, quiet)
    epoch = parsed.epoch
    return [(str(p), WindowBatch(epoch, mark, part, p)) for p, part in enumerate(parts)]


class WindowTable:
    """One counter partition of the activity flow (see the module docstring)."""

    def __init__(self, bucket_ms: int, n: int, mode: str, k_max: int, resume: dict[str, Any] | None = None,
                 summary: int = 0, changelog: Path | None = None) -> None:
        s = resume or {}
        if s.get("format", WINDOW_FORMAT) != WINDOW_FORMAT:
            raise ValueError(f"window state of format {s['format']!r}: this code reads {WINDOW_FORMAT!r} "
                             "(a recovery directory of a newer rankflow?)")
        self.bucket_ms, self.n, self.mode, self.k_max, self.summary = bucket_ms, n, mode, k_max, summary
        self.directory = changelog
        self.log: ShardChangelog | None = None
        self.epoch = s.get("epoch", 0)
        self.watermark = Watermark(s.get("watermark"))
        self.running: dict[str, int] = dict(s.get("running", {}))  # per source partition its greatest ts so far
        self.marks: list[SourceMark] = list(s.get("marks", ()))  # the open epoch's
        # to be judged at the barrier: (source partition, its greatest ts up to the event, event)
        self.waiting: list[tuple[str, int, WindowEvent]] = list(s.get("waiting", ()))
        self.expired: list[DeadLetter] = list(s.get("expired", ()))
        self.summaries: dict[int, MisraGries] = {}  # ``summary`` > 0: per bucket, docs/semantics/windows.md 5
        self.touched: set[int] = set()  # buckets whose summary changed since the last report
        self.unlogged: set[int] = set()  # ... since the last changelog frame
        if s.get("changelog") is not None:
            self.counts, self.summaries = self._restore(s["changelog"], s["window"])
        else:
            self.counts = WindowCounts(bucket_ms, n, mode, s.get("counts"))
            self.summaries = {b: MisraGries(summary, *st) for b, st in s.get("summaries", {}).items()}
        if changelog is not None:
            self.counts.take_dirty()  # from now on the counts note what changes, for the changelog
        self.top = RetakenTop(k_max, self.counts.counts)  # the partition's best pairs in the global order
        self.full = True  # an execution's first report carries every count

    # -- counting -------------------------------------------------------------------
    def stage(self, batch: WindowBatch) -> None:
        if batch.epoch != self.epoch:
            self.epoch = batch.epoch
            if self.log is not None:
                self.log.release(batch.epoch)
            elif self.directory is not None:
                self._open_log(batch.part)
            if self.directory is not None:
                BarrierSync.of_this_worker().expect(batch.epoch, self)
        mark = batch.mark
        self.marks.append(mark)
        prior = self.running.get(mark.partition, -1)
        first = self.counts.first
        bucket_ms, n = self.bucket_ms, self.n
        part = batch.events
        counts = part.counts
        if counts is not None and (not counts or min(counts) >= max(-1 if first is None else first,
                                                                    prior // bucket_ms - n + 1)):
            # summed by the kernel, and every bucket is in or after the window and within the
            # window of its partition's greatest ts so far: each pair counts, as its events would
            for b, keys in counts.items():
                self.counts.add_counts(b, keys)
            events = part.late  # none of the others expires or waits: the late ones keep their order
        else:
            events = part_events(part)
        for event in events:
            ws, ch, user, ts, seen, offset, raw = event
            b = ts // bucket_ms
            if first is not None and b < first:  # before the window: expired whatever the barrier says
                self._expire(mark.partition, event, self.watermark.value)  # type: ignore[arg-type]
            elif b < (max(seen, prior) // bucket_ms) - n + 1:
                self.waiting.append((mark.partition, max(seen, prior), event))
            else:
                self._count(ws, ch, user, b)
        if mark.max_ts is not None and mark.max_ts > prior:
            self.running[mark.partition] = mark.max_ts

    def _count(self, ws: str, ch: str, user: str, b: int) -> None:
        self.counts.add((ws, ch), user, b)
        if self.summary:
            summary = self.summaries.get(b)
            if summary is None:
                summary = self.summaries[b] = MisraGries(self.summary)
            summary.add((ws, ch))
            self.touched.add(b)
            self.unlogged.add(b)

    def _expire(self, partition: str, event: WindowEvent, w: int) -> None:
        ts, offset, raw = event[3], event[5], event[6]
        start = window_buckets(w, self.bucket_ms, self.n)[0] * self.bucket_ms
        self.expired.append(DeadLetter(EXPIRED, f"ts {ts} is before the window [{start}, ...) of watermark {w}: "
                                                f"it can never count", partition, offset, raw, self.epoch))

    def close(self, epoch: int) -> WindowReport:
        marks, self.marks = self.marks, []
        w = self.watermark.advance(marks)
        self._judge_waiting()
        if w is not None:
            self.counts.move_to(w)
            first = self.counts.first
            for b in [b for b in self.summaries if b < first]:  # type: ignore[operator]
                del self.summaries[b]
                self.unlogged.add(b)
        moved = self.counts.take_changed()
        self.top.update(moved, self.counts.counts)
        full, self.full = self.full, False
        changed = by_workspace(cast("dict[Pair, int]", self.counts.counts if full else moved))
        touched = set(self.summaries) if full else self.touched & set(self.summaries)
        self.touched = set()
        expired, self.expired = self.expired, []
        return WindowReport(epoch, w, changed, self.top.top(self.k_max), len(self.counts.counts),
                            expired, full, time.time(), {b: self.summaries[b].state() for b in touched})

    def _judge_waiting(self) -> None:
        """The events late by more than the window within their partition, now that the
        barrier's marks are in: expired, or counted."""
        waiting, self.waiting = self.waiting, []
        wm, bucket_ms, n = self.watermark, self.bucket_ms, self.n
        for partition, seen, event in waiting:
            ws, ch, user, ts = event[:4]
            w = wm.event_watermark(partition, seen)
            b = ts // bucket_ms
            if b < window_buckets(w, bucket_ms, n)[0]:
                self._expire(partition, event, w)
            else:
                self._count(ws, ch, user, b)

    # -- recovery -------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        small = {"format": WINDOW_FORMAT, "epoch": self.epoch, "watermark": self.watermark.state(), "running": dict(self.running),
                 "marks": list(self.marks), "waiting": list(self.waiting), "expired": list(self.expired)}
        if self.log is None:
            return {**small, "counts": self.counts.state(),
                    "summaries": {b: m.state() for b, m in self.summaries.items()}}
        # synced with the worker's other partitions of this barrier (connectors.barrier_sync)
        position = self.log.append(self._changes(), self._image, self.epoch, sync=False)
        BarrierSync.of_this_worker().written(self.epoch, self, self.log)
        return {**small, "changelog": position, "window": (self.counts.first, self.counts.last)}

    def _open_log(self, part: int) -> None:
        assert self.directory is not None
        self.log = ShardChangelog(self.directory, f"window-{part}", _merge_bucket)
        self.log.restore(None)

    def _changes(self) -> dict[str, Any]:
        """The changelog frame of a barrier: per changed bucket ``{workspace: {channel: count
        or new users}}`` (None: the bucket left), and each changed summary whole. Mode
        ``messages``: the counts are read as the pairs are nested, one loop per changed pair."""
        out: dict[str, Any] = {}
        users = self.mode == USERS
        buckets = self.counts.buckets
        for b, keys in self.counts.take_dirty(counts=False).items():
            out[str(b)] = None if keys is None else _nested(keys, True) if users else _nested_counts(keys, buckets[b])
        for b in self.unlogged:
            summary = self.summaries.get(b)
            out[f"s{b}"] = None if summary is None else _summary_json(summary)
        self.unlogged = set()
        return out

    def _image(self) -> dict[str, Any]:
        users = self.mode == USERS
        image: dict[str, Any] = {str(b): _nested(keys, users) for b, keys in self.counts.buckets.items()}
        image.update({f"s{b}": _summary_json(m) for b, m in self.summaries.items()})
        return image

    def _restore(self, position: Any, window: tuple[int | None, int | None]
                 ) -> tuple[WindowCounts, dict[int, MisraGries]]:
        assert self.directory is not None, "a changelog position without a changelog directory"
        self.log = ShardChangelog(self.directory, position[1], _merge_bucket)
        records = self.log.restore(position)
        buckets: dict[int, dict[Any, Any]] = {}
        summaries: dict[int, MisraGries] = {}
        users = self.mode == USERS
        for key, value in records.items():
            if value is None:
                continue
            if key.startswith("s"):
                counters, total = value
                summaries[int(key[1:])] = MisraGries(self.summary, {(ws, ch): c for ws, ch, c in counters}, total)
            else:
                buckets[int(key)] = {(ws, ch): (set(v) if users else v)
                                     for ws, channels in value.items() for ch, v in channels.items()}
        return WindowCounts.from_buckets(self.bucket_ms, self.n, self.mode, *window, buckets), summaries


def _nested(keys: dict[Any, Any], users: bool) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for (ws, ch), v in keys.items():
        mine = out.get(ws)
        if mine is None:
            mine = out[ws] = {}
        mine[ch] = sorted(v) if users else v
    return out


def _nested_counts(keys: set[Any], counts: dict[Any, int]) -> dict[str, dict[str, int]]:
    """A bucket's changed pairs (``keys``) with their counts there, nested as :func:`_nested`."""
    out: dict[str, dict[str, int]] = {}
    for key in keys:
        ws, ch = key
        mine = out.get(ws)
        if mine is None:
            mine = out[ws] = {}
        mine[ch] = counts[key]
    return out


def _summary_json(summary: MisraGries) -> list[Any]:
    counters = cast("dict[Pair, int]", summary.counters)
    return [[[ws, ch, c] for (ws, ch), c in counters.items()], summary.total]


def _merge_bucket(old: Any, new: Any) -> Any:
    """How a changelog frame's value folds into a bucket read so far: counts replace, new
    users join (mode ``users``), None removes the bucket; a summary is replaced whole."""
    if new is None or old is None or isinstance(new, list):
        return new
    for ws, channels in new.items():
        mine = old.get(ws)
        if mine is None:
            old[ws] = channels
            continue
        for ch, v in channels.items():
            if isinstance(v, list):
                got = mine.get(ch)
                mine[ch] = v if got is None else sorted(set(got) | set(v))
            else:
                mine[ch] = v
    return old


def by_workspace(counts: dict[Pair, int]) -> dict[str, dict[str, int]]:
    """Pair counts grouped by workspace, as Redis keeps them."""
    out: dict[str, dict[str, int]] = {}
    for (ws, ch), count in counts.items():
        mine = out.get(ws)
        if mine is None:
            mine = out[ws] = {}
        mine[ch] = count
    return out


def expired_dead_letters(item: tuple[str, WindowReport]) -> list[tuple[str, DeadLetter]]:
    """The dead-letter output's share of a report: its expired events."""
    _, report = item
    return [(d.partition, d) for d in report.expired]
