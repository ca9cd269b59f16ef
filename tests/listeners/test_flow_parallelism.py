"""The same log gives the same results whatever the workers, song partitions and
user shards, and every snapshot of a run with many switches is a consistent cut."""

from __future__ import annotations

import orjson
import pytest

from rankflow.generate import Chaos, generate
from tests.events import ranking, recent
from tests.model import Model, read_lines

STABLE_FIELDS = ("positions", "total_listeners", "counted_users", "active_songs", "dead_letters", "items", "errors")


@pytest.fixture(scope="module")
def generated_log(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("logs") / "generated.jsonl"
    generate(users=2_000, songs=300, events=30_000, seed=7, out=path)
    return str(path)


@pytest.fixture(scope="module")
def model(generated_log: str) -> Model:
    m = Model()
    for line in read_lines(generated_log):
        m.apply_line(line)
    return m


@pytest.mark.parametrize("workers,partitions,shards,by", [
    (1, 1, 0, "partition"), (1, 4, 64, "user"), (1, 16, 1, "partition"), (2, 1, 64, "user"), (2, 4, 0, "partition"),
    (2, 16, 7, "user"), (3, 4, 16, "partition")])
def test_workers_partitions_and_shards_do_not_change_results(flow, generated_log, model, workers, partitions,
                                                               shards, by):
    out = flow.run(generated_log, workers=workers, song_partitions=partitions, user_shards=shards, shard_by=by)
    final = out["final"]
    assert ranking(final) == model.ranking(100)
    assert recent(final) == model.recent_ranking(5, 100), "recent plays too (their starts cross workers)"
    assert final["total_listeners"] == final["counted_users"] == model.counted_users
    assert final["dead_letters"] == model.dead_letters == len(out["dead_letters"])
    assert final["positions"] == {generated_log: model.lines}
    assert out["counts"] == model.counts
    letters = [orjson.loads(line) for line in out["dead_letters"]]
    assert [(d["position"]["offset"], d["reason"] if d["reason"].startswith(("conflict", "version")) else "shape")
            for d in letters] == model.dead, "dead letters: in input order, each with the model's reason"
    assert {d["position"]["partition"] for d in letters} == {generated_log}


@pytest.mark.parametrize("shards,timeouts,by", [(0, 0.0, "partition"), (64, 0.0, "user"), (64, 0.02, "user"),
                                                (16, 0.02, "partition")])
def test_invariant_holds_in_every_snapshot_of_a_run_with_many_switches(flow, tmp_path, shards, timeouts, by):
    """... and with the sweeper's timers (docs/semantics/listeners.md 6) removing idle listeners."""
    path = tmp_path / "switches.jsonl"
    generate(users=300, songs=40, events=20_000, seed=11, out=path,
             chaos=Chaos(duplicate=0.05, late=0.1, stop_before_start=0.05, old_device=0.02, conflict=0.01,
                         timeout=timeouts, idle_ms=2_000))
    lines = read_lines(str(path))
    out = flow.run(str(path), workers=2, song_partitions=4, k_max=20, barrier_ms=2, read_chunk_bytes=4096,
                   user_shards=shards, shard_by=by)
    history = out["history"]
    assert len(history) >= 20, "the run should publish many snapshots"
    model, applied = Model(), 0
    for snap in history:
        assert snap["errors"] == []
        assert snap["total_listeners"] == snap["counted_users"]
        pos = snap["positions"][str(path)]
        assert pos >= applied
        for line in lines[applied:pos]:
            model.apply_line(line)
        applied = pos
        assert ranking(snap) == model.ranking(20), f"snapshot {snap['snapshot_id']} at line {pos}"
        assert snap["counted_users"] == model.counted_users
    assert applied == len(lines)
    ids = [s["snapshot_id"] for s in history]
    assert ids == sorted(set(ids))
