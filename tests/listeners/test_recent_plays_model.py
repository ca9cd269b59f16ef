"""Recent plays from the combine step to the merged ranking (docs/semantics/windows.md 7), without
Bytewax, against the window model of ``tests/window_model.py``: random batches and epochs of
one input partition, starts and other valid events, starts held and before the window, a
small ``K_max`` so that songs enter and leave the local tops, and a resume from the counters'
recovery state at any barrier.

The flow's parts under test are the ones recent plays go through: the user stage's form of
the starts (per bucket, their songs), ``combine_song_deltas`` (counted per bucket and song,
routed to the song's partition), the song partitions (``SongCounterLogic``: the window's
buckets, the local top kept by ``RetakenTop``) and ``combine_recent``.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rankflow.operators.recent_plays import combine_recent
from rankflow.operators.routing import SongBatch, combine_song_deltas
from rankflow.operators.song_counter import SongCounterLogic
from rankflow.operators.user_stage import NetChanges
from rankflow.state.window_rules import SourceMark, WindowCounts
from tests.window_model import WindowModel, workspace_ranking

MIN = 60_000
SONGS = ["a", "b", "ab", "z", "é", "\U0001f600"]  # byte order: a < ab < b < z < é < the emoji

# an event: (ts, the song of an accepted start, or None for any other valid event)
event = st.tuples(st.integers(0, 16).map(lambda q: q * 20_000), st.one_of(st.none(), st.sampled_from(SONGS)))
batch = st.lists(event, max_size=6)  # a source batch; an empty one has no watermark mark
epoch = st.lists(st.lists(batch, min_size=1, max_size=3), min_size=1, max_size=3)  # user shards' calls


class Partitions:
    """P song partitions fed as the flow feeds them: the combine step's batches, every source
    batch's tick with its mark, the epochs closed by the next epoch's first item."""

    def __init__(self, partitions: int, minutes: int, k_max: int) -> None:
        self.p, self.minutes, self.k_max = partitions, minutes, k_max
        self.logic = [self._new(None) for _ in range(partitions)]
        self.start = 0  # the input position of the next source batch

    def _new(self, resume):
        return SongCounterLogic(self.k_max, resume, recoverable=True, recent_minutes=self.minutes)

    def feed(self, e: int, calls: list[list[list[tuple[int, str | None]]]]) -> None:
        """Epoch ``e``: per user shard its batches; each batch ticks every partition with its mark."""
        decisions, ticks = [], []
        for shard, batches in enumerate(calls):
            starts: dict[int, list[str]] = {}
            counts: dict[tuple[str, int], list[int]] = {}
            for events in batches:
                for ts, song in events:
                    if song is not None:
                        starts.setdefault(ts // MIN, []).append(song)
                        acc = counts.setdefault((song, 0), [0, 0, 0])
                        acc[0] += 1
                        acc[1] += 1
                        acc[2] += 1
                mark = SourceMark("f", self.start, max((ts for ts, _ in events), default=None))
                ticks.append(SongBatch(e, mark=mark))
                self.start += len(events)
            if counts:
                decisions.append((str(shard), NetChanges(e, counts, starts)))
        routed: dict[str, list[SongBatch]] = {str(p): [] for p in range(self.p)}
        for p, item in combine_song_deltas(decisions, self.p):
            routed[p].append(item)
        self.reports = []
        for p, logic in enumerate(self.logic):
            out, _ = logic.on_batch(routed[str(p)] + [t for t in ticks])  # the merge: deltas, then ticks
            self.reports += out

    def resume(self) -> None:
        """A restart at this barrier: every partition from its recovery state."""
        self.logic = [self._new(logic.snapshot()) for logic in self.logic]

    def finish(self):
        self.reports = [r for logic in self.logic for r in logic.on_eof()[0]]
        return self.ranking()

    def ranking(self):
        if not self.reports:
            return None
        assert len(self.reports) == self.p
        for logic in self.logic:
            recent = logic.table.recent
            recent.top._check(recent.counts.counts)
        ranking, errors = combine_recent([r.recent for r in self.reports], self.minutes, self.k_max)
        assert errors == []
        return ranking


def expected(model: WindowModel, k: int):
    """Section 7 by the window model: starts are its events of "workspace" ``start``."""
    return [tuple(item) for item in workspace_ranking(model.counts(), "start")[:k]]


@settings(max_examples=200, deadline=None)
@given(epochs=st.lists(epoch, min_size=1, max_size=8), partitions=st.integers(1, 3), minutes=st.integers(1, 3),
       k_max=st.integers(1, 4), resume_at=st.integers(0, 8))
def test_recent_plays_match_the_window_model(epochs, partitions, minutes, k_max, resume_at):
    flow = Partitions(partitions, minutes, k_max)
    model = WindowModel(MIN, minutes)
    offset = 0
    for e, calls in enumerate(epochs, start=1):
        if e == resume_at:
            flow.resume()
        flow.feed(e, calls)
        ranking = flow.ranking()  # epoch e - 1 closed by epoch e's first item
        if ranking is not None:
            assert ranking.items == expected(model, k_max), f"epoch {e - 1}"
            assert ranking.watermark == model.w
        for batches in calls:  # the model takes epoch e's events after the ranking of e - 1
            for events in batches:
                for ts, song in events:
                    model.feed("f", offset, ("start" if song else "other", song or "", "", ts))
                    offset += 1
    ranking = flow.finish()
    assert ranking.items == expected(model, k_max)
    assert ranking.watermark == model.w


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, 8), st.dictionaries(st.sampled_from(SONGS), st.integers(1, 3))),
    st.tuples(st.just("move"), st.integers(0, 8), st.just({}))), max_size=20), n=st.integers(1, 3),
    track=st.booleans())
def test_add_counts_is_as_many_adds(steps, n, track):
    """``WindowCounts.add_counts`` counts, records as changed and as dirty exactly what one
    :meth:`WindowCounts.add` an event would; ``move_to`` says when a bucket with counts left,
    without which no count falls."""
    at_once, one_by_one = WindowCounts(MIN, n), WindowCounts(MIN, n)
    for c in (at_once, one_by_one):
        c.take_dirty()
    for kind, b, counts in steps:
        if kind == "move":
            before = dict(one_by_one.counts)
            live = {k for k, keys in one_by_one.buckets.items() if keys and one_by_one.in_window(k)}
            fell = at_once.move_to(b * MIN)
            assert one_by_one.move_to(b * MIN) == fell
            assert fell == any(not one_by_one.in_window(k) for k in live)  # a bucket with counts left
            assert fell or all(one_by_one.count(k) >= v for k, v in before.items())  # the only way one falls
        elif at_once.first is None or b >= at_once.first:
            at_once.add_counts(b, counts, track)
            if not track:  # untracked, the keys are not among the changed: add what tracking records
                at_once.changed.update(k for k in counts if at_once.in_window(b))
            for key, times in counts.items():
                for _ in range(times):
                    one_by_one.add(key, "", b)
        assert at_once.state() == one_by_one.state()
        assert at_once.take_dirty() == one_by_one.take_dirty()
