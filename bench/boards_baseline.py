"""The score boards' baseline: the seed's design (one Lua script per result), done competently.

The score-board flow is measured side by side with the design it replaces, on the same
backlog from the same local broker, and their boards are compared for exactness: a
benchmark of a system that counts wrong measures nothing. The seed (``applyScore``)
applies each Kafka message with one Redis script that checks and sets the last applied
offset of its partition for the game (so a redelivery counts nothing twice), ZINCRBYs
the player's points on the all-time, daily and ISO-weekly sorted sets (periods from
``played_at``), sets their expiry once (``EXPIRE NX``), and raises the best single
score with ``ZADD GT`` on a composite that puts ties in the order they were reached.
Scripts are pipelined, ``BATCH`` per round trip, as the listener baseline does.

It trusts its input, as the seed does: the match server signed it and anti-cheat checked
it before Kafka, so it verifies no signature, keeps no identities and applies every
well-formed result (what cannot be read is skipped and counted, never fatal). On a clean
log (``rankflow generate --kind scores --clean``) its boards are exactly docs/semantics/boards.md's.

Keys (the seed's, behind a prefix so it can share a Redis; ``{g}`` keeps a game in one slot):
``P:off:{g}:<partition>``, ``P:lb:{g}:all``, ``P:lb:{g}:daily:YYYY-MM-DD``,
``P:lb:{g}:weekly:YYYY-Www``, ``P:lb:{g}:best``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from datetime import datetime, UTC
from typing import Any, cast

import orjson
import redis
from confluent_kafka import Consumer, KafkaError, TopicPartition

from rankflow.connectors.kafka import topic_partitions
from rankflow.connectors.redis_replies import Scored

APPLY_SCORE_LUA = """
-- KEYS: offset, all, daily, weekly, best
-- ARGV: offset, points, player, daily ttl, weekly ttl, best composite
local applied = tonumber(redis.call('GET', KEYS[1]) or '-1')
if tonumber(ARGV[1]) <= applied then return false end
redis.call('SET', KEYS[1], ARGV[1])
local total = redis.call('ZINCRBY', KEYS[2], ARGV[2], ARGV[3])
redis.call('ZINCRBY', KEYS[3], ARGV[2], ARGV[3])
redis.call('EXPIRE', KEYS[3], ARGV[4], 'NX')
redis.call('ZINCRBY', KEYS[4], ARGV[2], ARGV[3])
redis.call('EXPIRE', KEYS[4], ARGV[5], 'NX')
redis.call('ZADD', KEYS[5], 'GT', ARGV[6], ARGV[3])
return total
"""

BATCH = 500  # results per pipelined round trip
DAY_MS = 86_400_000
DAY_TTL_S = 8 * 86_400  # the seed's: a week can be rebuilt from its seven days
WEEK_TTL_S = 14 * 86_400
TIME_BITS = 28  # 2^28 s is about 8.5 years of season
SEASON_START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
MAX_POINTS = 10_000
MAX_TIME_MS = 253_402_300_799_999


def encode_best(points: int, played_at: int, season_start_ms: int = SEASON_START_MS) -> int:
    """The seed's composite: points, then the earlier ``played_at`` (in seconds) higher.

    >>> encode_best(50, SEASON_START_MS + 1_500) == 50 * 2**28 + 2**28 - 2
    True
    >>> decode_best(encode_best(10_000, SEASON_START_MS))
    10000
    """
    seconds = min(max((played_at - season_start_ms) // 1000, 0), 2**TIME_BITS - 1)
    return points * 2**TIME_BITS + (2**TIME_BITS - 1 - seconds)


def decode_best(score: float) -> int:
    """The points of a composite best score (exact: composites stay below 2^53)."""
    return int(score) >> TIME_BITS


class _Periods:
    """``daily:YYYY-MM-DD`` and ``weekly:YYYY-Www`` of a ``played_at``, remembered per UTC day:
    a backlog has a handful of days and a million results."""

    def __init__(self) -> None:
        self._by_day: dict[int, tuple[str, str]] = {}

    def of(self, played_at: int) -> tuple[str, str]:
        day = played_at // DAY_MS
        names = self._by_day.get(day)
        if names is None:
            date = datetime.fromtimestamp(day * 86_400, tz=UTC).date()
            year, week, _ = date.isocalendar()
            names = self._by_day[day] = (f"daily:{date.isoformat()}", f"weekly:{year}-W{week:02d}")
        return names


def _fields(raw: bytes) -> tuple[str, str, int, int] | None:
    """(game, player, points, played_at), or None for what cannot be applied at all."""
    try:
        ev = orjson.loads(raw)
        game, player, points, played = ev["game_id"], ev["player_id"], ev["points"], ev["played_at"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None
    if not (isinstance(game, str) and game and isinstance(player, str) and player
            and type(points) is int and 0 <= points <= MAX_POINTS
            and type(played) is int and 0 <= played <= MAX_TIME_MS):
        return None
    return game, player, points, played


class BoardsBaseline:
    """Applies score messages to Redis with the seed's script, a pipelined batch at a time."""

    def __init__(self, redis_url: str, prefix: str, season_start_ms: int = SEASON_START_MS) -> None:
        self.client = redis.Redis.from_url(redis_url)
        self.prefix = prefix
        self.season_start_ms = season_start_ms
        self.periods = _Periods()
        self.sha = self.client.script_load(APPLY_SCORE_LUA)
        self.stats = {"events": 0, "applied": 0, "redelivered": 0, "invalid": 0}

    def apply_batch(self, messages: list[tuple[int, int, bytes]]) -> None:
        """Apply (partition, offset, value) messages in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        p, sha, season = self.prefix, self.sha, self.season_start_ms
        for partition, offset, raw in messages:
            fields = _fields(raw)
            if fields is None:
                self.stats["invalid"] += 1
                continue
            game, player, points, played = fields
            daily, weekly = self.periods.of(played)
            lb = f"{p}:lb:{{{game}}}:"
            pipe.evalsha(sha, 5, f"{p}:off:{{{game}}}:{partition}", lb + "all", lb + daily, lb + weekly,
                         lb + "best", offset, points, player, DAY_TTL_S, WEEK_TTL_S,
                         encode_best(points, played, season))
        replies = pipe.execute()
        skipped = sum(reply is None for reply in replies)
        self.stats["redelivered"] += skipped
        self.stats["applied"] += len(replies) - skipped
        self.stats["events"] += len(messages)

    def consume(self, bootstrap: str, topic: str, batch: int = BATCH,
                stop: Callable[[dict[str, int]], bool] = lambda s: False) -> dict[str, Any]:
        """Apply the topic from its start to the end it has when each partition reaches it."""
        parts = topic_partitions(bootstrap, topic)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "boards-baseline",
                             "enable.auto.commit": False, "enable.partition.eof": True, "fetch.wait.max.ms": 10})
        consumer.assign([TopicPartition(topic, part, 0) for part in parts])
        ended: set[int] = set()
        started = time.perf_counter()
        try:
            while len(ended) < len(parts) and not stop(self.stats):
                messages = []
                for m in consumer.consume(batch, 0.05):
                    err, part = m.error(), m.partition()
                    if err is not None and err.code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(err)
                    assert part is not None  # a message or a partition's end: of a partition
                    if err is not None:
                        ended.add(part)
                        continue
                    offset = m.offset()
                    assert offset is not None  # a message's
                    messages.append((part, offset, m.value() or b""))
                if messages:
                    self.apply_batch(messages)
        finally:
            consumer.close()
        seconds = time.perf_counter() - started
        return {**self.stats, "seconds": seconds, "events_per_s": self.stats["events"] / max(seconds, 1e-9)}

    def close(self) -> None:
        self.client.close()


def run_boards_baseline(bootstrap: str, topic: str, redis_url: str, prefix: str, *, batch: int = BATCH,
                        season_start_ms: int = SEASON_START_MS) -> dict[str, Any]:
    """Run the seed's design over the whole topic: events, applied, redelivered (skipped by the
    offset check), invalid, seconds, events_per_s."""
    baseline = BoardsBaseline(redis_url, prefix, season_start_ms)
    try:
        return baseline.consume(bootstrap, topic, batch)
    finally:
        baseline.close()


def read_baseline_boards(redis_url: str, prefix: str) -> dict[str, dict[str, dict[str, int]]]:
    """{game: {board: {player: score}}} as the baseline left them; ``best`` in points."""
    client = redis.Redis.from_url(redis_url)
    head = f"{prefix}:lb:{{"
    pattern = "".join("\\" + c if c in "*?[]\\" else c for c in head) + "*"
    boards: dict[str, dict[str, dict[str, int]]] = {}
    try:
        for key in client.scan_iter(match=pattern, count=1000):
            game, board = key.decode()[len(head):].rsplit("}:", 1)  # a board name holds no "}"
            decode = decode_best if board == "best" else int
            entries = cast(Scored, client.zrange(key, 0, -1, withscores=True))
            boards.setdefault(game, {})[board] = {player.decode(): decode(score) for player, score in entries}
    finally:
        client.close()
    return boards


def main(argv: list[str] | None = None) -> int:
    """Run the baseline as its own process (as the flow runs as its own); stats as JSON on stdout."""
    p = argparse.ArgumentParser(prog="python -m rankflow.bench.boards_baseline")
    p.add_argument("--brokers", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--redis", required=True)
    p.add_argument("--prefix", required=True, help="key prefix, so the baseline can share a Redis")
    p.add_argument("--batch", type=int, default=BATCH, help="results per round trip (default: %(default)s)")
    a = p.parse_args(argv)
    stats = run_boards_baseline(a.brokers, a.topic, a.redis, a.prefix, batch=a.batch)
    sys.stdout.buffer.write(orjson.dumps(stats) + b"\n")
    print(f"{stats['events']} events in {stats['seconds']:.2f}s ({stats['events_per_s']:,.0f}/s), "
          f"{stats['redelivered']} redelivered, {stats['invalid']} invalid", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
