"""The benchmark's baseline (the seed's first design) counts by the same rules as rankflow,
docs/semantics/listeners.md 3 and 6 included: so ``rankflow bench`` compares like for like.

A generated log with chaos and the sweeper's timers goes to a real broker; each form of
the baseline applies it in a real Redis, and its sorted set must be the reference model's
count table.
"""

from __future__ import annotations

import pytest

from rankflow.bench.baseline import Baseline
from rankflow.connectors.kafka import KafkaEndpoint
from rankflow.generate import Chaos, generate
from rankflow.produce import produce_file
from tests.model import model_of_lines, read_lines


@pytest.mark.parametrize("variant", ["full", "lean"])
def test_the_baseline_counts_like_the_model(tmp_path, kafka_brokers, topic, redis_url, namespace, variant):
    log = tmp_path / "events.jsonl"
    generate(users=500, songs=60, events=12_000, seed=43, out=log, chaos=Chaos(timeout=0.04, idle_ms=3_000))
    model = model_of_lines(read_lines(str(log)))
    assert model.timed_out > 100, "a log in which timers fire"
    produce_file(str(log), KafkaEndpoint(kafka_brokers, topic), partitions=3, progress=False)

    baseline = Baseline(redis_url, namespace, variant)
    result = baseline.consume(kafka_brokers, topic)
    try:
        songs = baseline.client.zrange(baseline.songs, 0, -1, withscores=True)
    finally:
        baseline.client.close()
    assert {song.decode(): int(score) for song, score in songs} == model.counts
    assert baseline.top(100) == model.ranking(100)
    assert result.events == model.lines
    assert result.conflicts == model.conflicts
    assert result.invalid == model.dead_letters - model.conflicts
