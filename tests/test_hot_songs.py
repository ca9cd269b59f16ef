"""A song taking half of all traffic is split into partial counters, and counts stay exact."""

from __future__ import annotations

import random

import orjson
import pytest
from hypothesis import HealthCheck, given, settings

from tests.events import ranking
from tests.model import Model
from tests.test_flow_matches_model import SHARDS, check_against_model, log_lines


def hot_log(n_events: int, seed: int) -> list[bytes]:
    """Half of all events are about one song; users switch, stop and repeat."""
    rng = random.Random(seed)
    version: dict[str, int] = {}
    current: dict[str, tuple[str, str, int]] = {}
    lines = []
    for i in range(n_events):
        user = f"u{rng.randrange(3000)}"
        if user in current and rng.random() < 0.3:
            pid, song, v = current.pop(user)
            etype = "STOP"
        else:
            version[user] = v = version.get(user, 0) + 1
            song = "the_hit" if rng.random() < 0.5 else f"song_{rng.randrange(100)}"
            pid, etype = f"{user}_p{v}", "START"
            current[user] = (pid, song, v)
        event = {"user_id": user, "playback_id": pid, "song_id": song, "type": etype, "version": v, "ts": i}
        lines.append(orjson.dumps(event))
        if rng.random() < 0.05:
            lines.append(orjson.dumps(event))  # a redelivery
    return lines


@pytest.mark.parametrize("shards", [0, 64])
def test_a_song_with_half_the_traffic_is_split_and_exact(flow, shards):
    lines = hot_log(60_000, seed=3)
    path = flow.write_log(lines)
    out = flow.run(path, workers=2, song_partitions=8, k_max=20, barrier_ms=5, read_chunk_bytes=8192,
                   hot_threshold=2000, hot_salts=4, hot_window_s=0.1, user_shards=shards)
    final = out["final"]
    assert final["split_songs"] == ["the_hit"]
    assert [i["song_id"] for i in final["items"]].count("the_hit") == 1, "a split song appears once"
    model, applied = Model(), 0
    for snap in out["history"]:
        pos = snap["positions"][path]
        for line in lines[applied:pos]:
            model.apply_line(line)
        applied = pos
        assert ranking(snap) == model.ranking(20), f"snapshot at line {pos}"
        assert snap["total_listeners"] == snap["counted_users"] == model.counted_users
        assert snap["errors"] == []
    assert applied == len(lines)
    assert any(s["split_songs"] == [] for s in out["history"]), "the song was split during the run"
    assert out["counts"] == model.counts, "the full count table adds the partials"


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=log_lines, shards=SHARDS)
def test_random_logs_with_every_song_split_equal_the_model(flow, lines, shards):
    path = flow.write_log(lines)
    out = flow.run(path, song_partitions=3, k_max=6, barrier_ms=1, read_chunk_bytes=64,
                   hot_threshold=1e-9, hot_salts=3, hot_window_s=0.0, user_shards=shards)
    check_against_model(out, lines, path, 6)
