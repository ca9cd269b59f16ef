"""docs/semantics/windows.md sections 2 to 4: the window rules and the counter table, against the spec's
worked example and a reference model (``tests/window_model.py``), without Bytewax."""

from __future__ import annotations

from types import SimpleNamespace

import orjson
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from rankflow.operators.merger import Cut
from rankflow.operators.window_counter import MessageParser, WindowTable, route_messages
from rankflow.operators.window_ranking import ActivityRanking
from rankflow.state.window_rules import (EXPIRED, SourceMark, Watermark, WindowCounts, bucket, place,
                                         window_bounds)
from tests.window_model import global_ranking, run_model, workspace_ranking

EXAMPLE = [  # section 8: (channel, user, ts), workspace A, one partition
    ("x", "u1", 600_000), ("y", "u2", 610_000), ("x", "u1", 650_000), ("y", "u3", 700_000),
    ("x", "u1", 590_000), ("x", "u4", 820_000), ("y", "u2", 650_000), ("x", "u4", 830_000),
]


def parsed_batch(partition: str, start: int, epoch: int, events: list[tuple[str, str, str, int]], partitions: int,
                 bucket_ms: int, n: int, per_event: bool, quiet: float = 0.0) -> SimpleNamespace:
    """A source batch of ``events`` as the flow's parse step makes it: their JSON lines through the
    kernel's checks and routing (``MessageParser``), one part per counter partition."""
    lines = [orjson.dumps({"workspace_id": ws, "channel_id": ch, "user_id": u, "ts": ts}) for ws, ch, u, ts in events]
    parts, dead = MessageParser(partitions, bucket_ms, n, per_event)(lines, range(start, start + len(lines)),
                                                                     partition, epoch)
    assert dead == []
    return SimpleNamespace(partition=partition, start=start, epoch=epoch, quiet_s=quiet, events=parts)


class Tables:
    """P counter tables fed the way the flow feeds them: batches routed, epochs closed."""

    def __init__(self, partitions: int, bucket_ms: int, n: int, mode: str = "messages", k_max: int = 100,
                 summary: int = 0) -> None:
        self.tables = [WindowTable(bucket_ms, n, mode, k_max, summary=summary) for _ in range(partitions)]
        self.bucket_ms, self.n, self.per_event = bucket_ms, n, mode != "messages" or summary > 0
        self.ranking = ActivityRanking(k_max, bucket_ms, n, mode, summary=summary)
        self.epoch = 1
        self.expired: list[tuple[str, int]] = []
        self.snapshot = None

    def batch(self, partition: str, start: int, events: list[tuple[str, str, str, int]], quiet: float = 0.0) -> None:
        parsed = parsed_batch(partition, start, self.epoch, events, len(self.tables), self.bucket_ms, self.n,
                              self.per_event, quiet)
        for p, wb in route_messages(parsed, len(self.tables), 5.0):
            self.tables[int(p)].stage(wb)

    def close(self):
        reports = {str(p): t.close(self.epoch) for p, t in enumerate(self.tables)}
        for r in reports.values():
            self.expired += [(d.partition, d.offset) for d in r.expired]
            assert all(d.reason == EXPIRED for d in r.expired)
        cut = Cut(self.epoch, 1, self.epoch, {}, 0, 0.0, {})
        self.snapshot = self.ranking.combine(cut, reports)
        self.epoch += 1
        return self.snapshot

    def counts(self) -> dict[tuple[str, str], int]:
        return {pair: n for t in self.tables for pair, n in t.counts.counts.items()}


def test_bucket_edges():
    assert [bucket(t, 60_000) for t in (0, 59_999, 60_000, 119_999)] == [0, 0, 1, 1]
    assert window_bounds(None, 60_000, 60) == (None, None)
    assert window_bounds(3_599_999, 60_000, 60) == (0, 3_600_000)
    assert window_bounds(3_600_000, 60_000, 60) == (60_000, 3_660_000)
    assert place(0, 3_599_999, 60_000, 60) == "counted"
    assert place(0, 3_600_000, 60_000, 60) == EXPIRED
    assert place(61, 3_600_000, 60_000, 60) == "held"


@pytest.mark.parametrize("mode,expected", [("messages", [("x", 2), ("y", 1)]), ("users", [("y", 1), ("x", 1)])])
@pytest.mark.parametrize("epochs", [[8], [1] * 8, [3, 2, 3], [5, 3]])
def test_worked_example(mode, expected, epochs):
    """Section 8, whatever the barriers: the same counts, and line 6 (only) expired."""
    t = Tables(1, 60_000, 3, mode)
    at = 0
    for size in epochs:
        t.batch("a.jsonl", at, [("A", ch, u, ts) for ch, u, ts in EXAMPLE[at:at + size]])
        at += size
        snap = t.close()
    assert t.expired == [("a.jsonl", 6)]
    assert snap.watermark == 830_000
    assert snap.to_json_obj(0)["window_start"] == 660_000 and snap.to_json_obj(0)["window_end"] == 840_000
    assert sorted(((ch, n) for (_, ch), n in t.counts().items()), key=lambda cn: (cn[1], cn[0]), reverse=True) == expected
    assert [(pair[1], n) for pair, n in snap.items] == expected


def test_example_counts_along_the_way():
    """Line by line, the counts of section 8's table."""
    t = Tables(1, 60_000, 3)
    seen = []
    for i, (ch, u, ts) in enumerate(EXAMPLE):
        t.batch("p", i, [("A", ch, u, ts)])
        t.close()
        seen.append(dict(sorted((c, n) for (_, c), n in t.counts().items())))
    assert seen == [{"x": 1}, {"x": 1, "y": 1}, {"x": 2, "y": 1}, {"x": 2, "y": 2}, {"x": 3, "y": 2},
                    {"x": 1, "y": 1}, {"x": 1, "y": 1}, {"x": 2, "y": 1}]


def test_line_4_after_line_5_is_expired_and_counts_agree():
    order = [0, 1, 2, 3, 5, 4, 6, 7]
    t = Tables(1, 60_000, 3)
    t.batch("p", 0, [("A", *EXAMPLE[i]) for i in order])
    t.close()
    assert sorted(off for _, off in t.expired) == [5, 6]  # positions 5 and 6 hold lines 4 and 6
    assert {c: n for (_, c), n in t.counts().items()} == {"x": 2, "y": 1}


def test_watermark_is_the_least_partition_and_never_goes_back():
    t = Tables(2, 60_000, 3)
    t.batch("0", 0, [("A", "x", "u", 600_000)])
    t.batch("1", 0, [("A", "y", "u", 900_000)])
    assert t.close().watermark == 600_000
    t.batch("0", 1, [("A", "x", "u", 1_000_000)])
    assert t.close().watermark == 900_000
    t.batch("2", 0, [("A", "z", "u", 100)])  # a partition first heard with old events
    snap = t.close()
    assert snap.watermark == 900_000
    assert t.expired == [("2", 0)]


def test_held_event_counts_once_the_watermark_reaches_it():
    t = Tables(2, 60_000, 3)
    t.batch("0", 0, [("A", "x", "u", 600_000)])
    t.batch("1", 0, [("A", "y", "u", 780_000)])  # bucket 13: held while W is in bucket 10
    t.close()
    assert t.counts() == {("A", "x"): 1}
    t.batch("0", 1, [("A", "x", "u", 790_000)])
    t.close()
    assert t.counts() == {("A", "x"): 1, ("A", "y"): 1}  # window 11..13: bucket 10 left, 13 joined


def test_quiet_partition_leaves_the_least_and_comes_back():
    t = Tables(1, 60_000, 3)
    t.batch("0", 0, [("A", "x", "u", 600_000)])
    t.batch("1", 0, [("A", "y", "u", 900_000)])
    assert t.close().watermark == 600_000
    t.batch("0", 1, [], quiet=6.0)
    assert t.close().watermark == 900_000
    t.batch("0", 1, [("A", "x", "u", 610_000)])
    snap = t.close()
    assert snap.watermark == 900_000 and t.expired == [("0", 1)]


def test_watermark_event_judgement_with_one_partition_is_the_running_maximum():
    w = Watermark()
    w.advance([SourceMark("p", 0, 700_000)])
    assert w.event_watermark("p", 650_000) == 650_000
    assert w.event_watermark("p", 700_000) == 700_000


def test_users_mode_counts_a_user_once_across_buckets():
    c = WindowCounts(60_000, 3, "users")
    c.move_to(0)
    for b, user in [(0, "bot"), (0, "bot"), (0, "ann")]:
        c.add(("W", "c"), user, b)
    c.move_to(120_000)
    c.add(("W", "c"), "bot", 2)
    assert c.count(("W", "c")) == 2
    c.move_to(180_000)  # bucket 0 leaves: ann goes, the bot stays (it posted in bucket 2)
    assert c.count(("W", "c")) == 1
    c.move_to(600_000)
    assert c.count(("W", "c")) == 0 and not c.users and not c.buckets


def test_far_future_event_empties_the_window():
    t = Tables(1, 60_000, 60)
    t.batch("p", 0, [("A", "x", "u", 600_000), ("A", "x", "u", 10**15), ("A", "x", "u", 700_000)])
    snap = t.close()
    assert t.counts() == {("A", "x"): 1} and snap.watermark == 10**15 and t.expired == [("p", 2)]


def test_state_round_trip_resumes_exactly():
    t = Tables(1, 60_000, 3, "users")
    t.batch("p", 0, [("A", ch, u, ts) for ch, u, ts in EXAMPLE[:5]])
    t.close()
    t.batch("p", 5, [("A", ch, u, ts) for ch, u, ts in EXAMPLE[5:6]])  # staged, epoch still open
    resumed = WindowTable(60_000, 3, "users", 100, t.tables[0].state())
    report = resumed.close(t.epoch)
    assert report.full and report.changed == {"A": {"x": 1, "y": 1}}
    assert resumed.counts.counts == {("A", "x"): 1, ("A", "y"): 1}


ids = st.sampled_from(["a", "b", "c", "é", "a!", "zz"])
events = st.tuples(ids, ids, st.sampled_from(["u1", "u2", "u3"]), st.integers(0, 12) .map(lambda m: m * 25_000))


@settings(max_examples=150, deadline=None)
@given(log=st.lists(events, max_size=40), cuts=st.lists(st.integers(1, 6), min_size=1, max_size=40),
       mode=st.sampled_from(["messages", "users"]), n=st.integers(1, 4), partitions=st.integers(1, 3))
def test_one_input_partition_matches_the_model(log, cuts, mode, n, partitions):
    """One input partition: counts, watermark and every ``expired`` verdict follow from the log alone."""
    t = Tables(partitions, 60_000, n, mode)
    at, i = 0, 0
    while at < len(log):
        size = cuts[i % len(cuts)]
        t.batch("p", at, list(log[at:at + size]))
        if i % 2:
            t.close()
        at, i = at + size, i + 1
    snap = t.close()
    model = run_model((("p", off, e) for off, e in enumerate(log)), 60_000, n, mode == "users")
    assert t.counts() == model.counts()
    assert sorted(t.expired) == sorted(model.expired)
    assert snap.watermark == model.w
    assert [(p, c) for p, c in snap.items] == global_ranking(model.counts())[:100]
    for ws in {e[0] for e in log}:
        mine = sorted(((ch, c) for (w, ch), c in t.counts().items() if w == ws), key=lambda x: (x[1], x[0]),
                      reverse=True)
        assert mine == workspace_ranking(model.counts(), ws)


@settings(max_examples=150, deadline=None)
@given(logs=st.lists(st.lists(events, min_size=1, max_size=15), min_size=2, max_size=3), data=st.data(),
       mode=st.sampled_from(["messages", "users"]), n=st.integers(1, 4))
def test_several_partitions_final_counts_do_not_depend_on_interleaving(logs, data, mode, n):
    """Several input partitions, any interleaving into batches and barriers in which every partition
    is heard from before ``W`` passes its events: the final counts are the model's."""
    names = [str(i) for i in range(len(logs))]
    t = Tables(2, 60_000, n, mode)
    at = [0] * len(logs)
    order: list[tuple[str, int, tuple]] = []
    for i, log in enumerate(logs):  # everyone's first event in the first barrier
        t.batch(names[i], 0, [log[0]])
        order.append((names[i], 0, log[0]))
        at[i] = 1
    while any(a < len(log) for a, log in zip(at, logs)):
        i = data.draw(st.sampled_from([j for j, log in enumerate(logs) if at[j] < len(log)]))
        size = data.draw(st.integers(1, 4))
        chunk = logs[i][at[i]:at[i] + size]
        t.batch(names[i], at[i], chunk)
        order += [(names[i], at[i] + k, e) for k, e in enumerate(chunk)]
        at[i] += len(chunk)
        if data.draw(st.booleans()):
            t.close()
    snap = t.close()
    final = run_model(order, 60_000, n, mode == "users")
    assume(final.proviso_holds())
    assert snap.watermark == final.w
    assert t.counts() == final.counts()


def check_summary_items(items: list, counts: dict, n_counters: int, k: int) -> None:
    """docs/semantics/windows.md 5, items 1 to 3, against exact counts."""
    total = sum(counts.values())
    for pair, low, high in items:
        assert low <= counts.get(pair, 0) <= high
        assert (high - low) * n_counters <= total
    assert items == sorted(items, key=lambda c: (c[2], c[1], c[0]), reverse=True)
    listed = {pair for pair, _, _ in items}
    for pair, true in counts.items():
        if true * n_counters > total and pair not in listed:
            # not listed: then K items are, each with count_high at least its true count (section 5)
            assert len(items) == k and all(high >= true for _, _, high in items)
    if len(counts) <= n_counters and len(items) < k:
        assert all(low == high == counts[pair] for pair, low, high in items), "never filled: exact"


@settings(max_examples=150, deadline=None)
@given(log=st.lists(events, max_size=60), cuts=st.lists(st.integers(1, 6), min_size=1, max_size=20),
       n=st.integers(1, 4), partitions=st.integers(1, 3), n_counters=st.integers(1, 5), k=st.integers(1, 8))
def test_global_summary_keeps_the_bounds_of_section_5(log, cuts, n, partitions, n_counters, k):
    t = Tables(partitions, 60_000, n, summary=n_counters, k_max=k)
    at, i = 0, 0
    while at < len(log):
        size = cuts[i % len(cuts)]
        t.batch("p", at, list(log[at:at + size]))
        snap = t.close()
        counts = run_model((("p", off, e) for off, e in enumerate(log[:at + size])), 60_000, n).counts()
        check_summary_items(snap.items, counts, n_counters, k)
        assert t.counts() == counts, "per-workspace counts stay exact"
        at, i = at + size, i + 1


def epoch_batches(log, cuts, n, per_event):
    """``log`` cut into epochs (``cuts`` events each, in turn) as one source partition's batches:
    each epoch with the ``WindowBatch`` es it routes to a single counter partition."""
    at, epoch = 0, 1
    while at < len(log):
        size = cuts[epoch % len(cuts)]
        parsed = parsed_batch("p", at, epoch, list(log[at:at + size]), 1, 60_000, n, per_event)
        yield epoch, [wb for _, wb in route_messages(parsed, 1, None)]
        at, epoch = at + size, epoch + 1


def feed(table, epoch, batches) -> None:
    """Stage an epoch's batches into ``table`` and close the epoch (its barrier)."""
    for wb in batches:
        table.stage(wb)
    table.close(epoch)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(log=st.lists(events, max_size=50), cuts=st.lists(st.integers(1, 5), min_size=1, max_size=10),
       mode=st.sampled_from(["messages", "users"]), summary=st.sampled_from([0, 2]), crash_at=st.integers(0, 12),
       compact=st.booleans())
@example(log=[("a", "a", "u1", 0)] * 14, cuts=[1], mode="messages", summary=0, crash_at=12, compact=True)  # 4 generations
@example(log=[("a", "a", "u1", 0)] * 14, cuts=[1], mode="messages", summary=0, crash_at=1, compact=True)
def test_changelog_restores_the_table_exactly(tmp_path_factory, log, cuts, mode, summary, crash_at, compact,
                                              monkeypatch):
    """A table with a changelog, snapshotted at every barrier and rebuilt from its last state at a
    random barrier, holds exactly the buckets, counts and summaries of the table that went on.

    The table goes on at most one epoch past the barrier it resumes from: with recovery on,
    Bytewax starts no epoch before the ones below it are committed, so a run that staged epoch
    ``E`` resumes from ``E - 1`` at the earliest, and the changelog deletes a generation that a
    compaction replaced once a later epoch exists (``ShardChangelog.release``). Going on
    further would resume from state Bytewax no longer holds."""
    from rankflow.connectors import changelog as changelog_module
    monkeypatch.setattr(changelog_module, "COMPACT_MIN_BYTES", 0 if compact else 1 << 22)
    directory = tmp_path_factory.mktemp("window-changelog")
    summary_mode = summary if mode == "messages" else 0
    table = WindowTable(60_000, 3, mode, 100, summary=summary_mode, changelog=directory)
    saved, last = None, 0
    per_event = mode != "messages" or summary_mode > 0
    for epoch, batches in epoch_batches(log, cuts, 3, per_event):
        feed(table, epoch, batches)
        state, last = table.state(), epoch  # Bytewax's snapshot at the barrier
        if epoch == crash_at:
            saved = state
        if epoch == crash_at + 1:
            break  # this epoch's frames are written, never committed: the restore cuts them off
    else:  # the log ended before crash_at + 1: resume from its last barrier
        if saved is None:
            saved, crash_at = table.state(), last
    # the run that went on past crash_at wrote frames Bytewax never committed: a restore cuts them off
    resumed = WindowTable(60_000, 3, mode, 100, saved, summary=summary_mode, changelog=directory)
    replay = WindowTable(60_000, 3, mode, 100, summary=summary_mode)
    for epoch, batches in epoch_batches(log, cuts, 3, per_event):
        if epoch > crash_at:
            break
        feed(replay, epoch, batches)
    assert resumed.counts.counts == replay.counts.counts
    assert resumed.counts.buckets == replay.counts.buckets
    assert (resumed.counts.first, resumed.counts.last) == (replay.counts.first, replay.counts.last)
    assert {b: m.state() for b, m in resumed.summaries.items()} == {b: m.state() for b, m in replay.summaries.items()}
    assert resumed.counts.users == replay.counts.users


def test_window_state_carries_its_format_and_another_format_is_refused():
    """A partition's stored state names its format; state stored before it did reads as the same
    fields; a format this code does not know is refused, never guessed."""
    from rankflow.operators.window_counter import WINDOW_FORMAT
    table = WindowTable(60_000, 3, "messages", 10)
    for epoch, batches in epoch_batches([("w", "c", "u1", 1_000), ("w", "c", "u2", 2_000)], [2], 3, False):
        feed(table, epoch, batches)
    state = table.state()
    assert state["format"] == WINDOW_FORMAT and table.counts.counts
    unversioned = {k: v for k, v in state.items() if k != "format"}
    assert WindowTable(60_000, 3, "messages", 10, unversioned).counts.counts == table.counts.counts
    with pytest.raises(ValueError, match="format 'rankflow-window/9'"):
        WindowTable(60_000, 3, "messages", 10, {**state, "format": "rankflow-window/9"})
