"""docs/semantics/listeners.md section 6 through the real flow and a real Redis: TIMEOUT events remove
idle playbacks, and a log with them gives the same counts on any layout, resumed or not.

The rules alone are in ``tests/listeners/test_rules.py``, the shape of a TIMEOUT in
``tests/listeners/test_events.py``; here the stories run end to end, and generated logs with the
sweeper's timers mixed in (``rankflow generate --timeouts``) are checked against the
reference model.
"""

from __future__ import annotations

import orjson
import pytest

from rankflow.generate import Chaos, generate
from tests.events import ev, ranking
from tests.model import Model, model_of_lines, read_lines

T = 45_000  # the sweeper's idle timeout in these stories


def timer(user: str, playback: str, song: str, version: int, ts: int, idle_ms: object = T, **extra: object) -> bytes:
    """A ``TIMEOUT`` as the sweeper writes it."""
    return ev(user, playback, song, "TIMEOUT", version, ts, idle_ms=idle_ms, **extra)


def test_a_timer_fires_on_an_idle_playback(flow):
    lines = [
        ev("u1", "p1", "song_a", "START", 1, 0),
        ev("u2", "p1", "song_a", "START", 1, 0),
        ev("u1", "p1", "song_a", "HEARTBEAT", 1, 15_000),
        timer("u1", "p1", "song_a", 1, 15_000 + T),  # idle since its heartbeat: removed
    ]
    out = flow.run(flow.write_log(lines))
    assert ranking(out["final"]) == [("song_a", 1)]
    assert out["final"]["total_listeners"] == out["final"]["counted_users"] == 1
    assert out["dead_letters"] == []


def test_timers_that_lose_their_race_change_nothing(flow):
    lines = [
        ev("u1", "p1", "song_a", "START", 1, 0),
        ev("u1", "p2", "song_b", "START", 2, 10_000),  # a switch ...
        timer("u1", "p1", "song_a", 1, 60_000),  # ... before the old playback's timer: stale
        ev("u2", "p1", "song_c", "START", 1, 50_000),
        timer("u2", "p1", "song_c", 1, 50_000 + T - 1),  # premature
        ev("u3", "p1", "song_d", "START", 1, 0),
        ev("u3", "p1", "song_d", "HEARTBEAT", 1, 40_000),  # a heartbeat after the timer was set at 0 + T
        timer("u3", "p1", "song_d", 1, T),
        timer("u4", "p1", "song_d", 1, T),  # a user never seen: no record is made
        timer("u3", "p1", "song_d", 2, 10**9),  # not this playback's version: no conflict, no change
    ]
    out = flow.run(flow.write_log(lines))
    assert ranking(out["final"]) == [("song_d", 1), ("song_c", 1), ("song_b", 1)]
    assert out["final"]["counted_users"] == 3
    assert out["dead_letters"] == [], "a TIMEOUT valid by shape is never a dead letter"


def test_after_a_timeout_the_playback_stays_closed(flow):
    lines = [
        ev("u1", "p1", "song_a", "START", 1, 0),
        timer("u1", "p1", "song_a", 1, T),
        ev("u1", "p1", "song_a", "HEARTBEAT", 1, T + 1),  # the player is back: too late for this playback
        ev("u1", "p1", "song_a", "START", 1, T + 2),  # a repeated START neither
        timer("u1", "p1", "song_a", 1, T + 3),  # the timer fires twice
        ev("u2", "p1", "song_b", "START", 1, 0),
        timer("u2", "p1", "song_b", 1, T),
        ev("u2", "p2", "song_b", "START", 2, T + 5),  # a new playback counts again
    ]
    out = flow.run(flow.write_log(lines), recent_minutes=0)
    assert ranking(out["final"]) == [("song_b", 1)]
    assert out["final"]["counted_users"] == 1


def test_malformed_timeouts_are_dead_letters_with_reason_and_position(flow):
    good = {"user_id": "u1", "playback_id": "p1", "song_id": "song_a", "type": "TIMEOUT", "version": 1, "ts": T}
    lines = [
        ev("u1", "p1", "song_a", "START", 1, 0),
        orjson.dumps(good),  # no idle_ms
        orjson.dumps({**good, "idle_ms": True}),
        orjson.dumps({**good, "idle_ms": 0}),
        orjson.dumps({**good, "idle_ms": -1}),
        orjson.dumps({**good, "idle_ms": "45000"}),
        orjson.dumps({**good, "idle_ms": 45000.0}),
        orjson.dumps({**good, "idle_ms": T, "version": False}),
    ]
    path = flow.write_log(lines)
    out = flow.run(path)
    assert ranking(out["final"]) == [("song_a", 1)], "none of them removed anything"
    dead = [orjson.loads(d) for d in out["dead_letters"]]
    assert [(d["reason"], d["position"]["offset"]) for d in dead] == [
        ("missing_field", 1), ("wrong_type", 2), ("out_of_range", 3), ("out_of_range", 4), ("wrong_type", 5),
        ("wrong_type", 6), ("wrong_type", 7)]
    assert dead[0]["detail"] == "idle_ms is missing" and dead[3]["detail"] == "idle_ms must be >= 1"
    assert all(d["position"]["partition"] == path for d in dead) and dead[1]["raw"] == lines[2].decode()
    assert out["final"]["dead_letters"] == 7


@pytest.mark.parametrize("shards", [0, 1, 4])
def test_heartbeats_before_a_restart_still_count_after_it(flow, tmp_path, shards):
    """A heartbeat changes only ``last_active``, nothing the counters see: it must still reach
    the recovery state, or a resumed run would time out a playback that was active. Three
    executions, so that the heartbeat is alone in its barriers: the START's barrier wrote the
    record, and only the heartbeat can write its ``last_active``."""
    recovery = tmp_path / "recovery"
    common = dict(recovery_dir=str(recovery), user_shards=shards, dead_letter=f"jsonl:{tmp_path / 'dead.jsonl'}")
    lines = [ev("u1", "p1", "song_a", "START", 1, 0), ev("u2", "p1", "song_b", "START", 1, 0)]
    path = flow.write_log(lines)
    namespace = flow.run(path, **common)["namespace"]
    lines.append(ev("u1", "p1", "song_a", "HEARTBEAT", 1, 40_000))
    flow.write_log(lines)
    assert ranking(flow.run(path, namespace=namespace, **common)["final"]) == [("song_b", 1), ("song_a", 1)]
    lines += [timer("u1", "p1", "song_a", 1, T + 5_000),  # active at 40 s: early
              timer("u2", "p1", "song_b", 1, T + 5_000)]  # idle since 0: removed
    flow.write_log(lines)
    out = flow.run(path, namespace=namespace, **common)
    assert ranking(out["final"]) == [("song_a", 1)]
    assert out["final"]["positions"] == {path: len(lines)}


# Generated logs with the sweeper's timers: 2,000 listeners acting every ~30 s of event
# time, so that a 20 s timeout finds idle playbacks and active ones.
@pytest.fixture(scope="module")
def timeout_log(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("logs") / "timeouts.jsonl"
    generate(users=2_000, songs=300, events=30_000, seed=31, out=path, chaos=Chaos(timeout=0.04, idle_ms=20_000))
    return str(path)


@pytest.fixture(scope="module")
def model(timeout_log: str) -> Model:
    return model_of_lines(read_lines(timeout_log))


def test_the_generated_log_has_every_kind_of_timer(timeout_log, model):
    kinds = {}
    for line in read_lines(timeout_log):
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(obj, dict) and obj.get("type") == "TIMEOUT":
            kinds[type(obj.get("idle_ms")).__name__] = kinds.get(type(obj.get("idle_ms")).__name__, 0) + 1
    assert kinds.get("int", 0) > 500 and model.timed_out > 200, "many timers, many of them firing"
    assert sum(kinds.values()) - kinds["int"] > 0, "and some malformed"


def check(out: dict, log: str, model: Model) -> None:
    final = out["final"]
    assert ranking(final) == model.ranking(100)
    assert out["counts"] == model.counts, "the full count table"
    assert final["total_listeners"] == final["counted_users"] == model.counted_users
    assert final["dead_letters"] == model.dead_letters == len(out["dead_letters"])
    assert final["positions"] == {log: model.lines}
    letters = [orjson.loads(line) for line in out["dead_letters"]]
    assert [(d["position"]["offset"], d["reason"] if d["reason"].startswith(("conflict", "version")) else "shape")
            for d in letters] == model.dead, "dead letters: in input order, each with the model's reason"


@pytest.mark.parametrize("workers,partitions,shards,recovery", [
    (1, 1, 0, False), (1, 4, 64, False), (2, 16, 7, False), (2, 4, 0, False),
    (1, 4, 0, True), (2, 3, 8, True)])
def test_a_log_with_timeouts_gives_the_same_counts_on_any_layout(flow, tmp_path, timeout_log, model, workers,
                                                                  partitions, shards, recovery):
    extra = {"recovery_dir": str(tmp_path / "recovery")} if recovery else {}
    out = flow.run(timeout_log, workers=workers, song_partitions=partitions, user_shards=shards, **extra)
    check(out, timeout_log, model)


@pytest.mark.parametrize("shards", [0, 16])
def test_a_log_with_timeouts_resumed_from_recovery(flow, tmp_path, timeout_log, model, shards):
    """Stopped at a third and resumed, with many barriers: the heartbeats' ``last_active``
    went through the changelogs (or Bytewax's store, one key per user) in between."""
    lines = read_lines(timeout_log)
    path = flow.write_log(lines[:len(lines) // 3], name="resumed.jsonl")
    common = dict(recovery_dir=str(tmp_path / "recovery"), user_shards=shards, song_partitions=4, barrier_ms=5,
                  read_chunk_bytes=8192, dead_letter=f"jsonl:{tmp_path / 'dead.jsonl'}")
    first = flow.run(path, **common)
    flow.write_log(lines, name="resumed.jsonl")
    out = flow.run(path, namespace=first["namespace"], **common)
    check(out, path, model)
