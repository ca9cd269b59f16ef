"""Recent plays: songs by accepted starts in the last N minutes (docs/semantics/windows.md section 7).

The listener flow counts them beside the listeners, from the same input and the same
user stage, with the window rules of ``state.window_rules`` (sections 2 to 4) and
nothing of its own:

* the **watermark** is section 2's over every playback event valid by shape: each
  source batch's :class:`state.window_rules.SourceMark` (its greatest ``ts``, and in a
  live run whether its partition is quiet) rides on the barrier tick that every song
  partition gets for that batch (``operators.routing.song_ticks``), so
  every partition advances the same :class:`state.window_rules.Watermark`;
* an **accepted start** is a ``START`` the user stage finds to be a newer playback
  (docs/semantics/listeners.md 3 rule 5: verdict ``started`` or ``switched``); the stage hands on
  its song in the list of the bucket of its ``ts``, and the combine step counts them per
  bucket and song (``Counter``, in C) and sends them to the song's own partition
  (``operators.routing``; never to the partial counters of a split song);
* each song partition keeps a :class:`RecentPlays`: at the close of an epoch it
  advances the watermark with the epoch's marks, slides its
  :class:`state.window_rules.WindowCounts` (mode ``messages``, keyed by song), adds
  the epoch's starts whose bucket is not before the window, a bucket's songs at once
  (held ones wait in their bucket), and reports its local top ``K_max`` (a
  :class:`state.ranking_index.RetakenTop`: counts in a window grow, except when a bucket
  leaves it, so only the top is kept in order, not every song: while counts only grow
  the changed songs alone can enter it, and once a bucket has left it is taken again
  from the window's counts, without listing the changes first);
* the listener's combiner :class:`operators.song_ranking.SongRanking` merges the P local tops (a song
  lives in one partition) into the snapshot's ``recent`` ranking, with the window.

Why the epoch's starts can be judged at its close, by the watermark after it: an
accepted start before the window of that watermark can never count again (the
window only moves forward), and one in it or held counts exactly while its bucket is
in the window. So a snapshot's counts are exactly the accepted starts before its
positions whose bucket is in the window of its watermark, which is section 7. Such a
start is no dead letter: it still counts as a listener.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from rankflow.operators.engine_types import SourceMark
from rankflow.operators.routing import RecentStarts
from rankflow.operators.song_keys import BUCKET_MS
from rankflow.state.ranking_index import COUNT_THEN_ID_DESCENDING, RetakenTop, merge_local_tops
from rankflow.state.snapshot import RecentRanking
from rankflow.state.window_rules import MESSAGES, Watermark, WindowCounts, window_bounds, window_buckets


class RecentReport(NamedTuple):
    """A song partition's recent plays at the close of an epoch."""

    watermark: int | None
    top: list[tuple[str, int]]  # the partition's local top K_max, in ranking order


class RecentPlays:
    """One song partition's recent plays: the watermark, the window's counts, their order.

    >>> r = RecentPlays(minutes=2, k_max=10)
    >>> r.mark(SourceMark("f", 0, 125_000)); r.add_starts({2: {"a": 1}, 0: {"b": 1}})
    >>> r.close()  # W 125,000: buckets 1..2; "b" (bucket 0) is before the window
    RecentReport(watermark=125000, top=[('a', 1)])
    >>> r.mark(SourceMark("f", 3, 200_000)); r.close()  # W 200,000: buckets 2..3
    RecentReport(watermark=200000, top=[('a', 1)])
    >>> r.mark(SourceMark("f", 4, 240_000)); r.close()  # buckets 3..4: "a" leaves
    RecentReport(watermark=240000, top=[])
    """

    __slots__ = ("k_max", "watermark", "counts", "top", "marks", "starts")

    def __init__(self, minutes: int, k_max: int, state: dict[str, Any] | None = None) -> None:
        if minutes < 1:
            raise ValueError("recent plays need a window of at least one minute")
        s = state or {}
        self.k_max = k_max
        self.watermark = w = Watermark(s.get("watermark"))
        # stored: the buckets alone; the window's counts follow from them and the watermark
        first, last = (None, None) if w.value is None else window_buckets(w.value, BUCKET_MS, minutes)
        self.counts = WindowCounts.from_buckets(BUCKET_MS, minutes, MESSAGES, first, last,
                                                {b: dict(keys) for b, keys in s.get("buckets", {}).items()})
        self.top = RetakenTop(k_max, self.counts.counts)  # the local top K_max of the window's counts
        self.marks: list[SourceMark] = list(s.get("marks", ()))  # the open epoch's, one per source batch
        # the open epoch's starts as the batches brought them (bucket -> song -> n), added at its close
        self.starts: list[RecentStarts] = [nested_starts(s["starts"])] if s.get("starts") else []

    def mark(self, mark: SourceMark) -> None:
        self.marks.append(mark)

    def add_starts(self, starts: RecentStarts) -> None:
        """Accepted starts of the open epoch, ``bucket -> song -> how many``: kept as they are
        until the close, which adds them straight to the window's buckets (one pass per start
        count, not one to merge them here and one to add them there)."""
        self.starts.append(starts)

    def close(self) -> RecentReport:
        """The open epoch is complete: advance the watermark, slide the window, count its starts."""
        marks, self.marks = self.marks, []
        starts, self.starts = self.starts, []
        marks.sort(key=lambda m: (m.partition, m.start))  # each partition's in input order (a stable sort)
        w = self.watermark.advance(marks)
        if w is None:
            if starts:  # an accepted start is a valid event: its batch's mark set a watermark
                raise AssertionError(f"accepted starts without a watermark: {starts[:3]}")
            return RecentReport(None, [])
        counts = self.counts
        fell = counts.move_to(w)
        first = counts.first
        assert first is not None  # a watermark places the window
        add, track = counts.add_counts, not fell
        for batch in starts:
            for b, songs in batch.items():
                if b >= first:  # else before the window for good: not counted, and no dead letter
                    add(b, songs, track)
        if fell:  # a bucket left: counts fell, so the top is taken again (changes would name every key of it)
            counts.discard_changed()
            self.top.retake(counts.counts)
        else:  # counts only grew: the changed keys alone can enter the top
            self.top.update(counts.take_changed(), counts.counts)
        return RecentReport(w, self.top.top(self.k_max))

    def state(self) -> dict[str, Any]:
        """What recovery stores: the watermark, the buckets (from the window's first on, held ones
        too; not the counts, which follow from them) and the open epoch's marks and starts
        (``bucket -> song -> n``)."""
        return {"watermark": self.watermark.state(),
                "buckets": {b: dict(keys) for b, keys in self.counts.buckets.items()},
                "marks": list(self.marks), "starts": merged_starts(self.starts)}


def merged_starts(batches: list[RecentStarts]) -> RecentStarts:
    """Batches of starts ``bucket -> song -> n`` summed into one.

    >>> merged_starts([{1: {"a": 1}}, {1: {"a": 2, "b": 1}, 2: {"a": 1}}])
    {1: {'a': 3, 'b': 1}, 2: {'a': 1}}
    """
    out: RecentStarts = {}
    for batch in batches:
        for b, songs in batch.items():
            mine = out.get(b)
            if mine is None:
                out[b] = dict(songs)
                continue
            for song, n in songs.items():
                mine[song] = mine.get(song, 0) + n
    return out


def nested_starts(stored: dict[Any, Any]) -> RecentStarts:
    """Stored open-epoch starts as ``bucket -> song -> n``; state stored before they were kept
    so holds them flat, ``(song, bucket) -> n``.

    >>> nested_starts({("a", 2): 1, ("b", 2): 3}), nested_starts({2: {"a": 1}})
    ({2: {'a': 1, 'b': 3}}, {2: {'a': 1}})
    """
    if not all(isinstance(key, tuple) for key in stored):
        return {b: dict(songs) for b, songs in stored.items()}
    out: RecentStarts = {}
    for (song, b), n in stored.items():
        out.setdefault(b, {})[song] = n
    return out


def combine_recent(reports: list[RecentReport | None], minutes: int, k_max: int) -> tuple[RecentRanking, list[str]]:
    """The snapshot's recent ranking from every song partition's report of one epoch, and any
    error (the partitions compute the watermark from the same marks: they must agree). A
    report of None (stored before recent plays were on) has nothing to add."""
    known = [r for r in reports if r is not None]
    marks = {r.watermark for r in known}
    errors = [] if len(marks) <= 1 else [f"recent plays: partitions disagree on the watermark: "
                                         f"{sorted(marks, key=str)}"]
    w = max((m for m in marks if m is not None), default=None)
    start, end = window_bounds(w, BUCKET_MS, minutes)
    top = merge_local_tops([r.top for r in known], k_max, COUNT_THEN_ID_DESCENDING)
    return RecentRanking(start, end, w, top), errors
