"""Recent plays (docs/semantics/windows.md 7) through the real flow and a real Redis: the stories, every
snapshot of a run fed line by line (one input partition, then several, held starts
included), idle partitions in a live run, and the unit under the flow."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest
import redis

from rankflow.connectors.jsonl import JsonlSource
from rankflow.connectors.redis_generations import join_run
from rankflow.connectors.redis_read import read_history, read_latest
from rankflow.connectors.source_batch import STOP
from rankflow.execution import execute
from rankflow.operators.recent_plays import RecentPlays
from rankflow.operators.song_counter import SongCounterLogic
from rankflow.operators.routing import SongBatch
from rankflow.options import RunOptions
from rankflow.runner import listener_flow
from rankflow.endpoints import make_dead_letter_sink
from rankflow.state.window_rules import SourceMark
from tests.conftest import run_line_by_line
from tests.events import ev, ranking, recent, recent_window
from tests.model import Model, model_of_lines

MIN = 60_000


def test_a_repeated_start_counts_once(flow):
    lines = [ev("u1", "p1", "song_a", "START", 1, 1_000)] * 3
    out = flow.run(flow.write_log(lines))
    assert recent(out["final"]) == [("song_a", 1)]
    assert out["dead_letters"] == []


def test_a_start_after_its_stop_counts_nothing(flow):
    lines = [ev("u0", "p0", "song_b", "START", 1, 1_000),
             ev("u1", "p1", "song_a", "STOP", 1, 2_000),  # the STOP arrives first: the playback is closed
             ev("u1", "p1", "song_a", "START", 1, 1_500)]
    out = flow.run(flow.write_log(lines))
    assert recent(out["final"]) == [("song_b", 1)]
    assert ranking(out["final"]) == [("song_b", 1)]


def test_a_superseded_start_counts_nothing(flow):
    lines = [ev("u1", "p2", "song_b", "START", 2, 5_000),
             ev("u1", "p1", "song_a", "START", 1, 4_000)]  # the old device, late
    out = flow.run(flow.write_log(lines))
    assert recent(out["final"]) == [("song_b", 1)]


def test_a_conflicting_start_counts_nothing_but_moves_the_watermark(flow):
    lines = [ev("u1", "p1", "song_a", "START", 1, 1_000),
             ev("u1", "p1", "song_b", "START", 1, 2_000),  # same playback, other song: conflict
             ev("u1", "p2", "song_c", "START", 1, 3_000),  # version reused: conflict
             ev("u2", "p9", "song_d", "START", 7, 4_000)]
    out = flow.run(flow.write_log(lines))
    assert recent(out["final"]) == [("song_d", 1), ("song_a", 1)]
    assert len(out["dead_letters"]) == 2
    late = lines + [ev("u1", "p1", "song_z", "START", 1, 10 * MIN)]  # a conflict far ahead: W moves there
    out = flow.run(flow.write_log(late))
    assert recent(out["final"]) == [] and recent_window(out["final"]) == (6 * MIN, 11 * MIN, 10 * MIN)
    assert ranking(out["final"]) == [("song_d", 1), ("song_a", 1)]


def test_every_type_moves_the_watermark_and_invalid_events_do_not(flow):
    lines = [ev("u1", "p1", "song_a", "START", 1, 1_000),
             ev("u2", "p1", "song_b", "HEARTBEAT", 1, 4 * MIN),  # a heartbeat of an unknown playback
             b'{"user_id": "u3", "ts": 99999999}',  # invalid by shape: no watermark
             ev("u3", "p1", "song_c", "START", 1, 5 * MIN - 1)]
    out = flow.run(flow.write_log(lines))
    assert recent_window(out["final"]) == (0, 5 * MIN, 5 * MIN - 1)
    assert recent(out["final"]) == [("song_c", 1), ("song_a", 1)]
    out = flow.run(flow.write_log(lines + [ev("u3", "p1", "song_c", "STOP", 1, 5 * MIN)]))
    assert recent_window(out["final"]) == (MIN, 6 * MIN, 5 * MIN)  # the STOP moved W: bucket 0 left
    assert recent(out["final"]) == [("song_c", 1)] and ranking(out["final"]) == [("song_a", 1)]


def test_a_switch_counts_the_new_song_and_the_old_one_keeps_its_play(flow):
    lines = [ev("user_36", "playback_901", "song_101", "START", 42, 10_000),
             ev("user_36", "playback_902", "song_202", "START", 43, 20_000),
             ev("user_36", "playback_901", "song_101", "STOP", 42, 15_000)]  # the old STOP, late
    out = flow.run(flow.write_log(lines))
    assert recent(out["final"]) == [("song_202", 1), ("song_101", 1)]
    assert ranking(out["final"]) == [("song_202", 1)]


def test_an_accepted_start_before_the_window_is_a_listener_but_no_play_and_no_dead_letter(flow):
    lines = [ev("u2", "p1", "song_b", "START", 1, 10 * MIN),
             ev("u1", "p1", "song_a", "START", 1, 10_000)]  # accepted, 10 minutes late
    out = flow.run(flow.write_log(lines))
    assert recent(out["final"]) == [("song_b", 1)]
    assert ranking(out["final"]) == [("song_b", 1), ("song_a", 1)]
    assert out["dead_letters"] == [] and out["final"]["dead_letters"] == 0


def test_plays_leave_the_window_as_the_watermark_moves(flow):
    lines = [ev(f"u{m}", "p1", s, "START", 1, m * MIN + 500) for m, s in enumerate(["x", "y", "x", "z", "x"])]
    lines += [ev("w", "p1", "y", "START", 1, 6 * MIN + 1)]  # W 6:00.001: buckets 2..6
    out = flow.run(flow.write_log(lines), recent_minutes=5)
    assert recent(out["final"]) == [("x", 2), ("z", 1), ("y", 1)]
    assert recent_window(out["final"]) == (2 * MIN, 7 * MIN, 6 * MIN + 1)
    out = flow.run(flow.write_log(lines), recent_minutes=2)  # buckets 5..6
    assert recent(out["final"]) == [("y", 1)]


def test_ties_rank_by_song_id_descending_byte_wise(flow):
    songs = ["song_9", "song_10", "song_a", "Song_b", "song_é", "song_\U0001f3b5"]
    lines = [ev(f"u{i}", "p", s, "START", 1, 1_000) for i, s in enumerate(songs)]
    lines += [ev("x", "px", "song_1", "START", 1, 1_000), ev("y", "py", "song_1", "START", 1, 1_000)]
    out = flow.run(flow.write_log(lines), song_partitions=3, k_max=4)
    assert recent(out["final"]) == [("song_1", 2), ("song_\U0001f3b5", 1), ("song_é", 1), ("song_a", 1)]


def test_a_split_song_counts_each_start_once(flow):
    lines = [ev(f"u{i}", "p", "hit", "START", 1, 1_000 + i) for i in range(12)]
    lines += [ev(f"u{i}", "p", "hit", "STOP", 1, 2_000) for i in range(3)]
    out = flow.run(flow.write_log(lines), song_partitions=4, hot_threshold=0, split_songs=["hit"], hot_salts=3,
                   user_shards=4, barrier_ms=1, read_chunk_bytes=64)  # split from its second batch on
    assert any(snap["split_songs"] == ["hit"] for snap in out["history"])
    assert recent(out["final"]) == [("hit", 12)] and ranking(out["final"]) == [("hit", 9)]


def test_no_watermark_before_the_first_valid_event(flow):
    out = flow.run(flow.write_log([b"not json", b"{}"]))
    assert out["final"]["recent"] == {"window_start": None, "window_end": None, "watermark": None, "items": []}


def test_event_time_of_any_size(flow, redis_client):
    huge = 2**70 + 12_345
    out = flow.run(flow.write_log([ev("u1", "p1", "song_a", "START", 1, 0).replace(b'"ts":0', b'"ts":%d' % huge)]))
    assert recent_window(out["final"]) == (huge // MIN * MIN - 4 * MIN, (huge // MIN + 1) * MIN, huge)
    assert recent(out["final"]) == [("song_a", 1)]


def test_off_publishes_no_recent_plays(flow):
    out = flow.run(flow.write_log([ev("u1", "p1", "song_a", "START", 1, 1_000)]), recent_minutes=0)
    assert "recent" not in out["final"] and ranking(out["final"]) == [("song_a", 1)]


def test_every_snapshot_of_one_partition_line_by_line(flow):
    """Each line in its own barrier: every snapshot's recent plays are the model's at its position."""
    lines = [
        ev("u1", "p1", "a", "START", 1, 0),
        ev("u2", "p1", "b", "START", 1, 30_000),
        ev("u1", "p2", "c", "START", 2, 70_000),  # switch: c gains a play, a keeps its
        ev("u2", "p1", "b", "START", 1, 71_000),  # repeated
        ev("u3", "p2", "d", "STOP", 2, 72_000),  # stop first ...
        ev("u3", "p2", "d", "START", 2, 73_000),  # ... so the late start counts nothing
        ev("u4", "p1", "e", "HEARTBEAT", 1, 2 * MIN + 1),  # W 2:00: bucket 0 leaves (n = 2)
        ev("u5", "p1", "f", "START", 1, 10_000),  # accepted, before the window
        ev("u1", "p2", "x", "START", 2, 2 * MIN + 2),  # conflict
        ev("u6", "p1", "g", "START", 1, 3 * MIN + 5),  # bucket 1 leaves
    ]
    out = run_line_by_line(flow, lines, recent_minutes=2)
    path, model, seen = out["path"], Model(), 0
    for snap in out["history"]:
        for line in lines[seen:snap["positions"][path]]:
            model.apply_line(line)
        seen = snap["positions"][path]
        assert recent(snap) == model.recent_ranking(2, 100), f"at line {seen}"
        assert recent_window(snap) == model.recent_window(2)
    assert seen == len(lines) and recent(out["history"][-1]) == [("g", 1)]


class PartitionsLineByLine:
    """A live run over several JSON Lines files (one input partition each), fed one line at a
    time: each line in a barrier of its own, in an interleaving the test chooses."""

    def __init__(self, flow, files: int, **options) -> None:
        self.paths = [flow.write_log([], name=f"part-{i}-{uuid.uuid4().hex[:6]}.jsonl") for i in range(files)]
        self.namespace = f"flow-{uuid.uuid4().hex[:12]}"
        self.opts = RunOptions(input=f"jsonl:{self.paths[0]}", redis_url=flow.redis_url, namespace=self.namespace,
                               dead_letter=f"jsonl:{flow.tmp / 'dead-parts.jsonl'}", **options)
        self.client = redis.Redis.from_url(flow.redis_url)
        self.failure: list[BaseException] = []
        self.sent = [0] * files
        token, generation = join_run(self.client, self.namespace, uuid.uuid4().hex, fresh=True)
        self.dataflow = listener_flow(self.opts, token, generation, True, JsonlSource(self.paths, follow=True),
                                      make_dead_letter_sink(self.opts.dead_letter))
        self.thread = threading.Thread(target=self._run, name="flow")
        self.thread.start()

    def _run(self) -> None:
        try:
            execute(self.dataflow, self.opts, None)
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            self.failure.append(exc)

    def send(self, part: int, line: bytes) -> dict:
        with open(self.paths[part], "ab") as out:
            out.write(line + b"\n")
        self.sent[part] += 1
        return self.wait(lambda snap: all(snap["positions"].get(p, 0) >= n for p, n in zip(self.paths, self.sent)))

    def wait(self, ok, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while (snap := read_latest(self.client, self.namespace)) is None or not ok(snap):
            assert not self.failure and time.monotonic() < deadline, f"never published: {self.failure}"
            time.sleep(0.005)
        return snap

    def stop(self) -> list[dict]:
        STOP.set()
        self.thread.join(timeout=60)
        assert not self.failure, self.failure
        try:
            return read_history(self.client, self.namespace)
        finally:
            self.client.close()


def test_several_partitions_line_by_line_held_starts_count_once_the_watermark_reaches_them(flow):
    steps = [
        (0, ev("u1", "p1", "a", "START", 1, 10 * MIN)),  # W 10:00
        (1, ev("u2", "p1", "b", "START", 1, 5 * MIN)),  # partition 1 heard: the least falls, W stays 10:00
        (2, ev("u3", "p1", "c", "START", 1, 7 * MIN)),  # bucket 7: in the window 7..10 (n = 4)
        (0, ev("u4", "p1", "d", "START", 1, 13 * MIN)),  # partition 0 ahead: W is still 10:00, d held
        (1, ev("u5", "p1", "e", "START", 1, 12 * MIN)),  # partition 1 at 12:00, partition 2 holds W
        (2, ev("u6", "p1", "f", "HEARTBEAT", 1, 12 * MIN + 5)),  # W 12:00: buckets 9..12, a and e count, c leaves
        (1, ev("u7", "p1", "g", "HEARTBEAT", 1, 14 * MIN)),
        (2, ev("u8", "p1", "h", "START", 1, 14 * MIN)),  # W 13:00 (partition 0): d counts, h is held
        (0, ev("u9", "p1", "i", "START", 1, 6 * MIN)),  # accepted, before the window: a listener only
    ]
    run = PartitionsLineByLine(flow, 3, idle_timeout_s=3600.0, recent_minutes=4, song_partitions=3)
    try:
        model = Model()
        for step, (part, line) in enumerate(steps):
            snap = run.send(part, line)
            model.apply_line(line, str(part))
            assert sum(snap["positions"].values()) == step + 1
            assert recent(snap) == model.recent_ranking(4, 100), f"after step {step}"
            assert recent_window(snap) == model.recent_window(4)
            assert ranking(snap) == model.ranking(100)
    finally:
        history = run.stop()
    assert recent(history[-1]) == [("e", 1), ("d", 1), ("a", 1)]
    assert recent_window(history[-1]) == (10 * MIN, 14 * MIN, 13 * MIN)
    assert len(ranking(history[-1])) == 7, "every accepted start is a listener"


def test_a_live_run_leaves_a_quiet_partition_out_of_the_watermark(flow):
    run = PartitionsLineByLine(flow, 2, idle_timeout_s=1.5, recent_minutes=5)
    try:
        run.send(1, ev("u0", "p1", "s0", "HEARTBEAT", 1, 0))
        snap = run.send(0, ev("u1", "p1", "a", "START", 1, 10 * MIN))
        if snap["recent"]["watermark"] == 0:  # partition 1 not quiet yet: the start is held
            assert recent(snap) == []
        snap = run.wait(lambda s: s["recent"]["watermark"] == 10 * MIN, timeout=30)  # partition 1 went quiet
        assert recent(snap) == [("a", 1)]
        snap = run.send(1, ev("u2", "p1", "b", "START", 1, 2 * MIN))  # back, older: W does not go back
        assert recent_window(snap) == (6 * MIN, 11 * MIN, 10 * MIN) and recent(snap) == [("a", 1)]
        assert ranking(snap) == [("b", 1), ("a", 1)]
    finally:
        run.stop()


def test_the_song_table_keeps_recent_plays_across_a_resume():
    """The counter's recovery state holds the window: a resumed partition goes on where it was."""
    logic = SongCounterLogic(k_max=5, resume=None, recoverable=True, recent_minutes=2)
    logic.on_batch([SongBatch(1, mark=SourceMark("f", 0, 70_000)), SongBatch(1, [("a", 0, 1, 1)], starts={1: {"a": 1}})])
    logic.on_batch([SongBatch(2, mark=SourceMark("f", 1, 80_000)), SongBatch(2, [("b", 0, 1, 1)], starts={0: {"b": 1}})])
    state = logic.snapshot()  # epoch 2 still open
    resumed = SongCounterLogic(k_max=5, resume=state, recoverable=True, recent_minutes=2)
    [report] = resumed.on_eof()[0]
    assert report.recent == (80_000, [("b", 1), ("a", 1)])
    assert RecentPlays(2, 5, state.table.recent).counts.counts == {"a": 1}


@pytest.mark.parametrize("minutes", [0, 1, 5])
def test_a_resume_with_other_recent_minutes_is_refused(flow, tmp_path, minutes):
    from rankflow.options import UsageError

    path = flow.write_log([ev("u1", "p1", "song_a", "START", 1, 1_000)])
    recovery, dead = str(tmp_path / "recovery"), f"jsonl:{tmp_path / 'dead.jsonl'}"
    first = flow.run(path, recovery_dir=recovery, dead_letter=dead, recent_minutes=3)
    with pytest.raises(UsageError, match="--recent-minutes 3"):
        flow.run(path, recovery_dir=recovery, dead_letter=dead, recent_minutes=minutes)
    again = flow.run(path, recovery_dir=recovery, dead_letter=dead, recent_minutes=3, namespace=first["namespace"])
    assert recent(again["final"]) == [("song_a", 1)]


def test_generated_log_every_snapshot(flow):
    """A generated log with chaos (duplicates, late events, stop-first, old devices, conflicts,
    the sweeper's timers) cut into many barriers: every snapshot's recent plays equal the
    model's at its position."""
    from rankflow.generate import Chaos, generate
    from tests.model import read_lines

    log = Path(flow.tmp) / "gen.jsonl"
    generate(users=300, songs=40, events=20_000, seed=11, out=log, chaos=Chaos(timeout=0.02, idle_ms=2_000))
    lines = read_lines(str(log))
    out = flow.run(str(log), recent_minutes=1, barrier_ms=5, read_chunk_bytes=4096, song_partitions=3, k_max=20)
    model, seen = Model(), 0
    assert len(out["history"]) > 5
    for snap in out["history"]:
        for line in lines[seen:snap["positions"][str(log)]]:
            model.apply_line(line)
        seen = snap["positions"][str(log)]
        assert recent(snap) == model.recent_ranking(1, 20), f"at line {seen}"
        assert recent_window(snap) == model.recent_window(1)
    assert seen == len(lines) and model_of_lines(lines).recent_ranking(1, 20) == recent(out["final"])
    assert recent(out["final"]), "the window holds plays at the end"


def test_window_counts_add_a_count_at_once_as_that_many_adds():
    from rankflow.state.window_rules import WindowCounts

    one, many = WindowCounts(MIN, 2), WindowCounts(MIN, 2)
    for c in (one, many):
        c.move_to(MIN)
        c.take_dirty()  # the changelog's record starts
    for _ in range(3):
        one.add("s", "", 1)
        one.add("t", "", 3)  # held
    many.add("s", "", 1, 3)
    many.add("t", "", 3, 3)
    assert one.state() == many.state() and many.count("s") == 3 and many.count("t") == 0
    assert one.take_dirty() == many.take_dirty() == {1: {"s": 3}, 3: {"t": 3}}
    many.move_to(3 * MIN)
    assert many.count("t") == 3 and many.count("s") == 0
