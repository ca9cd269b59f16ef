"""The seed's score-board design as a baseline, on a real broker and a real Redis: its boards
are exactly an independent sum and max of a clean log, and a redelivery counts nothing twice."""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from datetime import datetime, UTC
from typing import Any

import pytest

from rankflow.bench.boards_baseline import (DAY_TTL_S, SEASON_START_MS, WEEK_TTL_S, read_baseline_boards,
                                            run_boards_baseline)
from rankflow.connectors.kafka import KafkaEndpoint
from rankflow.generate_scores import ScoreChaos, generate_scores
from rankflow.produce import produce_file

KEY = bytes.fromhex("ab" * 32)


def expected_boards(events: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, int]]]:
    """docs/semantics/boards.md section 3 for a log where every result is accepted."""
    boards: dict[str, dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(dict))
    for ev in events:
        played = datetime.fromtimestamp(ev["played_at"] / 1000, tz=UTC)
        year, week, _ = played.isocalendar()
        game, player, points = boards[ev["game_id"]], ev["player_id"], ev["points"]
        for board in ("all", f"daily:{played.date().isoformat()}", f"weekly:{year}-W{week:02d}"):
            game[board][player] = game[board].get(player, 0) + points
        game["best"][player] = max(game["best"].get(player, 0), points)
    return {g: dict(b) for g, b in boards.items()}


@pytest.fixture(scope="module")
def clean_topic(tmp_path_factory, kafka_brokers) -> tuple[str, list[dict[str, Any]]]:
    log = tmp_path_factory.mktemp("boards") / "clean.jsonl"
    generate_scores(300, 3, 4000, 21, log, key=KEY, clean=True)
    topic = "scores-" + uuid.uuid4().hex[:10]
    produce_file(str(log), KafkaEndpoint(kafka_brokers, topic), partitions=3, progress=False, key_field="player_id")
    return topic, [json.loads(line) for line in log.read_bytes().splitlines()]


def test_boards_are_the_exact_sums_and_maxima(kafka_brokers, redis_url, redis_client, clean_topic):
    topic, events = clean_topic
    prefix = "bl-" + uuid.uuid4().hex[:8]
    stats = run_boards_baseline(kafka_brokers, topic, redis_url, prefix)
    assert stats["events"] == stats["applied"] == len(events)
    assert stats["redelivered"] == stats["invalid"] == 0 and stats["events_per_s"] > 0

    boards = read_baseline_boards(redis_url, prefix)
    expected = expected_boards(events)
    assert boards == expected
    some = next(iter(expected))
    assert {"weekly:2026-W53", "weekly:2027-W01", "daily:2026-12-31", "daily:2027-01-04"} <= set(expected[some])

    tag = f"{prefix}:lb:{{{some}}}"
    assert 0 < redis_client.ttl(f"{tag}:daily:2027-01-01") <= DAY_TTL_S
    assert DAY_TTL_S < redis_client.ttl(f"{tag}:weekly:2026-W53") <= WEEK_TTL_S
    assert redis_client.ttl(f"{tag}:all") == redis_client.ttl(f"{tag}:best") == -1


def test_best_keeps_who_reached_it_first(kafka_brokers, redis_url, redis_client, clean_topic):
    """The composite under ``best``: among equal points, the earliest ``played_at`` (in seconds)."""
    topic, events = clean_topic
    prefix = "bl-" + uuid.uuid4().hex[:8]
    run_boards_baseline(kafka_brokers, topic, redis_url, prefix)
    first: dict[tuple[str, str], tuple[int, int]] = {}
    for ev in events:
        k, mine = (ev["game_id"], ev["player_id"]), (ev["points"], -ev["played_at"])
        first[k] = max(first.get(k, mine), mine)
    for (game, player), (points, minus_played) in list(first.items())[:200]:
        seconds = (-minus_played - SEASON_START_MS) // 1000
        composite = redis_client.zscore(f"{prefix}:lb:{{{game}}}:best", player)
        assert composite == points * 2**28 + 2**28 - 1 - seconds


def test_a_redelivery_counts_nothing_twice(kafka_brokers, redis_url, clean_topic):
    topic, events = clean_topic
    prefix = "bl-" + uuid.uuid4().hex[:8]
    run_boards_baseline(kafka_brokers, topic, redis_url, prefix)
    again = run_boards_baseline(kafka_brokers, topic, redis_url, prefix)  # a new consumer, from offset 0
    assert again["events"] == again["redelivered"] == len(events) and again["applied"] == 0
    assert read_baseline_boards(redis_url, prefix) == expected_boards(events)


def test_what_cannot_be_read_is_skipped(tmp_path, kafka_brokers, redis_url):
    """On a log with chaos the baseline trusts what it can read (so its boards differ from the
    flow's there: that is what the clean log is for) and skips the rest without failing."""
    log = tmp_path / "chaos.jsonl"
    generate_scores(100, 2, 3000, 4, log, key=KEY, chaos=ScoreChaos().scaled(5))
    topic = "scores-" + uuid.uuid4().hex[:10]
    produce_file(str(log), KafkaEndpoint(kafka_brokers, topic), partitions=2, progress=False, key_field="player_id")
    stats = run_boards_baseline(kafka_brokers, topic, redis_url, "bl-" + uuid.uuid4().hex[:8])
    assert stats["events"] == 3000 and stats["invalid"] > 0
    assert stats["applied"] + stats["invalid"] == 3000
