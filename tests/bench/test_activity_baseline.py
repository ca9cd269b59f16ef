"""The seed's activity design as a baseline, on a real broker and a real Redis: its bucket
counts over a window are exactly a count made from the log, its read path ranks a workspace's
channels in docs/semantics/windows.md 4's order, and a replayed backlog keeps its window (TTLs on the event
clock)."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from typing import Any

import pytest

from rankflow.bench.activity_baseline import (BUCKET_MS, TTL_S, WINDOW_BUCKETS, BaselineKeys, BaselineReader,
                                              read_clock, read_positions, run_activity_baseline, ttl_seconds,
                                              window_counts)
from rankflow.connectors.kafka import KafkaEndpoint
from rankflow.generate_messages import generate_messages
from rankflow.produce import produce_file
from rankflow.state.message_events import parse_message_records
from tests.window_model import workspace_ranking

PARTITIONS = 3
EVENTS = 6000


def log_counts(events: list[dict[str, Any]], first: int, last: int) -> Counter:
    """Per (workspace, channel) the events whose bucket is in ``first .. last``."""
    return Counter((e["workspace_id"], e["channel_id"]) for e in events if first <= e["ts"] // BUCKET_MS <= last)


@pytest.fixture(scope="module")
def clean_topic(tmp_path_factory, kafka_brokers) -> tuple[str, list[dict[str, Any]]]:
    """A clean log spanning about 100 minutes of event time (so buckets leave the window)."""
    log = tmp_path_factory.mktemp("activity") / "clean.jsonl"
    generate_messages(EVENTS, 5, log, workspaces=12, channels=30, users=40, rate=1.0, clean=True)
    topic = "messages-" + uuid.uuid4().hex[:10]
    produce_file(str(log), KafkaEndpoint(kafka_brokers, topic), partitions=PARTITIONS, progress=False)
    return topic, [json.loads(line) for line in log.read_bytes().splitlines()]


def redis_ms(client) -> int:
    """Redis's own clock in ms (``TIME``), which its expiry times are on."""
    seconds, micros = client.time()
    return seconds * 1000 + micros // 1000


@pytest.mark.parametrize("expire", ["per-message", "per-batch"])
def test_window_counts_are_a_count_of_the_log(kafka_brokers, redis_url, redis_client, clean_topic, expire):
    topic, events = clean_topic
    prefix = "abl-" + uuid.uuid4().hex[:8]
    keys = BaselineKeys(prefix)
    busiest = Counter(e["workspace_id"] for e in events).most_common(1)[0][0]
    last = max(e["ts"] for e in events) // BUCKET_MS
    checked = (last, last - 30, last - WINDOW_BUCKETS + 1)  # the newest bucket, an older one, the window's oldest
    run_started_ms = redis_ms(redis_client)  # every bucket's last EXPIRE is sent between these two readings
    stats = run_activity_baseline(kafka_brokers, topic, redis_url, prefix, expire=expire, batch=97)
    run_ended_ms = redis_ms(redis_client)
    expiry_ms = {b: redis_client.pexpiretime(keys.bucket(busiest, b)) for b in checked}  # read at once: see below
    assert stats["events"] == stats["counted"] == len(events) and stats["invalid"] == 0
    clock = max(e["ts"] for e in events)
    assert stats["clock"] == read_clock(redis_client, prefix) == clock
    assert sum(read_positions(redis_client, prefix).values()) == len(events)

    assert last == clock // BUCKET_MS
    assert last - events[0]["ts"] // BUCKET_MS > WINDOW_BUCKETS + 10  # the window slid past the first buckets
    for first, end in ((last - WINDOW_BUCKETS + 1, last), (last - 70, last - 20)):  # the final window, an older one
        want = log_counts(events, first, end)
        got = Counter()
        for ws in {e["workspace_id"] for e in events}:
            got.update({(ws, ch): n for ch, n in window_counts(redis_client, prefix, ws, first, end).items()})
        assert got == want

    # A replayed backlog is not expired at once: each bucket got the TTL it would have had live
    # at the consumer's clock when it was last written (between its own ts and the final clock).
    # A correctness bound on the TTLs, not a speed check: it bounds *when each key expires* (an
    # absolute time on Redis's clock, PEXPIRETIME), never how long the run took. The bucket's last
    # EXPIRE was sent at some moment between run_started_ms and run_ended_ms, with a TTL between
    # ttl_seconds(b, clock) (sent at the final clock) and ttl_seconds(b, b * BUCKET_MS) (at its own
    # minute); a slower run only moves those two readings apart and widens the interval, so the bound
    # holds at any machine speed and fails only on a wrong TTL (one taken from the wall clock's now
    # would expire the replayed backlog at once, below the lower bound).
    # The expiry times are read right after the run: each key outlives its last write by at least
    # its TTL at the final clock, two minutes or more (checked below), so it is still there.
    for b in checked:
        earliest_ms = run_started_ms + ttl_seconds(b, clock) * 1000
        latest_ms = run_ended_ms + ttl_seconds(b, b * BUCKET_MS) * 1000
        assert earliest_ms <= expiry_ms[b] <= latest_ms, (b, earliest_ms, expiry_ms[b], latest_ms)
    assert ttl_seconds(last - WINDOW_BUCKETS + 1, clock) >= 120  # the window's oldest: minutes left
    assert ttl_seconds(last, clock) > TTL_S - 1  # the newest bucket: the seed's 3660 s (and its minute's rest)


def test_reads_rank_the_window_as_windows_md_4(kafka_brokers, redis_url, redis_client, clean_topic):
    topic, events = clean_topic
    prefix = "abl-" + uuid.uuid4().hex[:8]
    run_activity_baseline(kafka_brokers, topic, redis_url, prefix)
    clock = read_clock(redis_client, prefix)
    assert clock is not None
    last = clock // BUCKET_MS
    counts = dict(log_counts(events, last - WINDOW_BUCKETS + 1, last))
    reader = BaselineReader(redis_client, prefix, now_ms=lambda: clock)
    for ws in sorted({w for w, _ in counts}):
        ranking = workspace_ranking(counts, ws)
        assert reader.top(ws, 100) == ranking[:100]
        assert reader.top(ws, 3) == ranking[:3]
        for rank, (channel, count) in enumerate(ranking, start=1):
            assert reader.channel(ws, channel) == (count, rank)
    assert reader.channel(ws, "no-such-channel") is None
    assert reader.top("no-such-workspace", 10) == []

    # The result is cached (5 s): a count added meanwhile shows only once the cache expired.
    keys = BaselineKeys(prefix)
    channel, count = workspace_ranking(counts, ws)[0]
    redis_client.zincrby(keys.bucket(ws, last), 5, channel)
    assert reader.channel(ws, channel)[0] == count
    redis_client.delete(keys.top(ws))
    assert reader.channel(ws, channel)[0] == count + 5
    assert 0 < redis_client.pttl(keys.top(ws)) <= 5000


def test_invalid_records_are_counted_and_skipped(kafka_brokers, redis_url, redis_client, tmp_path):
    """The same validation as the flow (docs/semantics/windows.md 1 checks 1-3): what it dead-letters for shape,
    the baseline skips and counts."""
    log = tmp_path / "chaos.jsonl"
    generate_messages(3000, 9, log, workspaces=5, channels=10, users=20, rate=5.0)
    lines = log.read_bytes().split(b"\n")[:-1]
    valid, dead = parse_message_records(lines, range(len(lines)), "x", 0)
    assert dead
    topic = "messages-" + uuid.uuid4().hex[:10]
    produce_file(str(log), KafkaEndpoint(kafka_brokers, topic), partitions=2, progress=False)
    stats = run_activity_baseline(kafka_brokers, topic, redis_url, "abl-" + uuid.uuid4().hex[:8])
    assert (stats["events"], stats["counted"], stats["invalid"]) == (len(lines), len(valid), len(dead))


def test_docstring_examples():
    import doctest

    from rankflow.bench import activity_baseline

    result = doctest.testmod(activity_baseline)
    assert result.attempted > 0 and result.failed == 0


def test_the_memory_logs_hold_the_pairs_they_say(tmp_path):
    """The memory part's logs: the last hour's pairs are all in one window, the hours before
    hold as many other pairs, and ts only grows."""
    from rankflow.bench.activity.logs import HOUR_MS, MEMORY_START_MS, active_pairs_log

    path = tmp_path / "m.jsonl"
    active_pairs_log(path, 600, 7, 2, seed=3)
    events = [json.loads(line) for line in path.read_bytes().splitlines()]
    assert len(events) == 3 * 600
    assert [e["ts"] for e in events] == sorted(e["ts"] for e in events)
    last = [e for e in events if e["ts"] >= MEMORY_START_MS + 2 * HOUR_MS]
    pairs = {(e["workspace_id"], e["channel_id"]) for e in last}
    assert len(pairs) == 600 and len({ws for ws, _ in pairs}) == 7
    assert len({(e["workspace_id"], e["channel_id"]) for e in events}) == 3 * 600
    w = max(e["ts"] for e in events)
    assert min(e["ts"] for e in last) // BUCKET_MS >= w // BUCKET_MS - WINDOW_BUCKETS + 1  # one window


def test_freshness_is_measured_to_the_first_state_that_covers_a_message():
    from rankflow.bench.rig import first_covering

    states = [(10.0, {"t/0": 5}), (11.0, {"t/0": 5, "t/1": 3}), (12.5, {"t/0": 9, "t/1": 3})]
    samples = {(0, 4): 9.0, (0, 5): 9.5, (1, 2): 10.0, (1, 3): 10.0}
    assert first_covering(states, "t", samples) == {(0, 4): 1.0, (0, 5): 3.0, (1, 2): 1.0}
