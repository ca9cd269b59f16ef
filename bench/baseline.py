"""The baseline: the seed's first design, done competently, in two forms.

One consumer reads the topic and applies every event with one Redis Lua script that
reads the user record, decides by the same rules as rankflow (docs/semantics/listeners.md 3, and 6:
the record's ``last_active``, which a heartbeat moves forward, and ``TIMEOUT``),
writes the user record and changes the song's score in a sorted set (ZINCRBY, ZREM
at zero), atomically. Events are validated in Python and sent pipelined. Its
ranking is the sorted set: exact, and comparable with rankflow's.

* **full** (``APPLY_LUA``, the seed's design as written): also keeps a playback
  record per playback, pipelined a consumed batch (up to 1,000 events) at a time;
* **lean** (``LEAN_LUA``, the strongest form of the design): only the user record
  and the sorted set, pipelined 500 events at a time. rankflow is measured against
  this one: beat the strongest form of the old design, not the weakest.

Its state lives in Redis, so it is durable to the extent Redis is; rankflow's
durable mode (``--recovery-dir``) is the fair comparison.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import orjson
import redis
from confluent_kafka import Consumer, KafkaError, TopicPartition

from rankflow.connectors.kafka import topic_partitions
from rankflow.connectors.redis_replies import Scored
from rankflow.state.events import InvalidEvent, validate

APPLY_LUA = """
-- KEYS[1] user record, KEYS[2] playback record, KEYS[3] sorted set of songs
-- ARGV: playback_id, song_id, version, type, user_id, ts, idle_ms (0 unless TIMEOUT)
local u = redis.call('HMGET', KEYS[1], 'v', 'p', 's', 'on', 'a')
local p, s, v, t = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local function add(song, n)
  local c = tonumber(redis.call('ZINCRBY', KEYS[3], n, song))
  if c <= 0 then redis.call('ZREM', KEYS[3], song) end
  if c < 0 then return redis.error_reply('negative count for ' .. song) end
end
if t == 'TIMEOUT' then
  if not u[1] or p ~= u[2] or v ~= tonumber(u[1]) or u[4] ~= '1' then return 'stale_timeout' end
  if tonumber(u[5] or '0') + tonumber(ARGV[7]) > tonumber(ARGV[6]) then return 'early_timeout' end
  add(u[3], -1)
  redis.call('HSET', KEYS[1], 'on', '0')
  redis.call('HSET', KEYS[2], 'status', 'CLOSED')
  return 'timed_out'
end
if u[1] then
  local uv = tonumber(u[1])
  if p == u[2] then
    if s ~= u[3] or v ~= uv then return 'conflict' end
    if u[4] == '1' and t == 'STOP' then
      add(s, -1)
      redis.call('HSET', KEYS[1], 'on', '0')
      redis.call('HSET', KEYS[2], 'status', 'CLOSED')
      return 'stopped'
    end
    if u[4] == '1' and t == 'HEARTBEAT' then
      if tonumber(ARGV[6]) > tonumber(u[5] or '0') then redis.call('HSET', KEYS[1], 'a', ARGV[6]) end
      return 'heartbeat'
    end
    return 'repeated'
  end
  if v == uv then return 'conflict' end
  if v < uv then return 'superseded' end
end
if t == 'HEARTBEAT' then return 'heartbeat' end
if u[1] and u[4] == '1' then add(u[3], -1) end
local on = '0'
if t == 'START' then on = '1'; add(s, 1) end
redis.call('HSET', KEYS[1], 'v', ARGV[3], 'p', p, 's', s, 'on', on, 'a', ARGV[6])
redis.call('HSET', KEYS[2], 'user', ARGV[5], 'song', s, 'status', on == '1' and 'PLAYING' or 'CLOSED')
return 'applied'
"""


LEAN_LUA = """
-- KEYS[1] user record, KEYS[2] sorted set of songs; ARGV: playback_id, song_id, version, type, ts, idle_ms
local u = redis.call('HMGET', KEYS[1], 'v', 'p', 's', 'on', 'a')
local p, s, v, t = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local function add(song, n)
  if tonumber(redis.call('ZINCRBY', KEYS[2], n, song)) <= 0 then redis.call('ZREM', KEYS[2], song) end
end
if t == 'TIMEOUT' then
  if not u[1] or p ~= u[2] or v ~= tonumber(u[1]) or u[4] ~= '1' then return 'stale_timeout' end
  if tonumber(u[5] or '0') + tonumber(ARGV[6]) > tonumber(ARGV[5]) then return 'early_timeout' end
  add(u[3], -1)
  redis.call('HSET', KEYS[1], 'on', '0')
  return 'timed_out'
end
if u[1] then
  local uv = tonumber(u[1])
  if p == u[2] then
    if s ~= u[3] or v ~= uv then return 'conflict' end
    if u[4] == '1' and t == 'STOP' then
      add(s, -1)
      redis.call('HSET', KEYS[1], 'on', '0')
    elseif u[4] == '1' and t == 'HEARTBEAT' and tonumber(ARGV[5]) > tonumber(u[5] or '0') then
      redis.call('HSET', KEYS[1], 'a', ARGV[5])
    end
    return 'same'
  end
  if v == uv then return 'conflict' end
  if v < uv then return 'superseded' end
end
if t == 'HEARTBEAT' then return 'heartbeat' end
if u[1] and u[4] == '1' then add(u[3], -1) end
local on = '0'
if t == 'START' then on = '1'; add(s, 1) end
redis.call('HSET', KEYS[1], 'v', ARGV[3], 'p', p, 's', s, 'on', on, 'a', ARGV[5])
return 'applied'
"""

VARIANTS = {"full": 1000, "lean": 500}
"""Each form of the baseline and the number of events it pipelines at a time."""


@dataclass
class BaselineResult:
    events: int = 0
    invalid: int = 0
    conflicts: int = 0
    seconds: float = 0.0
    applied_at: dict[tuple[int, int], float] = field(default_factory=dict)  # sampled (partition, offset) -> time


class Baseline:
    def __init__(self, redis_url: str, namespace: str, variant: str = "full") -> None:
        self.client = redis.Redis.from_url(redis_url)
        self.tag = "{" + namespace + "}"
        self.songs = f"{self.tag}:songs"
        self.lean = variant == "lean"
        self.batch = VARIANTS[variant]
        self.script_sha = self.client.script_load(LEAN_LUA if self.lean else APPLY_LUA)

    def top(self, k: int) -> list[tuple[str, int]]:
        pairs = cast(Scored, self.client.zrange(self.songs, 0, k - 1, desc=True, withscores=True))
        return [(song.decode(), int(score)) for song, score in pairs]

    def apply_batch(self, values: list[bytes], result: BaselineResult) -> None:
        pipe = self.client.pipeline(transaction=False)
        tag, songs, sha = self.tag, self.songs, self.script_sha
        for raw in values:
            try:
                user, playback, song, etype, version, ts, idle_ms = validate(orjson.loads(raw), raw)
            except (InvalidEvent, orjson.JSONDecodeError):
                result.invalid += 1
                continue
            if self.lean:
                pipe.evalsha(sha, 2, f"{tag}:u:{user}", songs, playback, song, version, etype, ts, idle_ms)
            else:
                pipe.evalsha(sha, 3, f"{tag}:u:{user}", f"{tag}:pb:{user}:{playback}", songs,
                             playback, song, version, etype, user, ts, idle_ms)
        for outcome in pipe.execute():
            if outcome == b"conflict":
                result.conflicts += 1

    def consume(self, brokers: str, topic: str, until_eof: bool = True, sample_every: int = 0,
                stop: Callable[[BaselineResult], bool] = lambda r: False) -> BaselineResult:
        """Apply the topic from the beginning; sample (partition, offset) -> applied time."""
        parts = topic_partitions(brokers, topic)
        consumer = Consumer({"bootstrap.servers": brokers, "group.id": "baseline", "enable.auto.commit": False,
                             "enable.partition.eof": until_eof, "fetch.wait.max.ms": 10})
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        result, ended = BaselineResult(), set[int]()
        started = time.perf_counter()
        while not stop(result) and (not until_eof or len(ended) < len(parts)):
            msgs = consumer.consume(self.batch, 0.05)
            values: list[bytes] = []
            sampled: list[tuple[int, int]] = []
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        part = m.partition()
                        assert part is not None  # a partition's end names its partition
                        ended.add(part)
                        continue
                    raise RuntimeError(err)
                values.append(m.value() or b"")
                if sample_every:
                    part, offset = m.partition(), m.offset()
                    assert part is not None and offset is not None  # a message's
                    if offset % sample_every == 0:
                        sampled.append((part, offset))
            if values:
                self.apply_batch(values, result)
                result.events += len(values)
                now = time.time()
                for key in sampled:
                    result.applied_at[key] = now
        result.seconds = time.perf_counter() - started
        consumer.close()
        return result


def main(argv: list[str] | None = None) -> int:
    """Run the baseline as its own process (as rankflow runs as its own)."""
    p = argparse.ArgumentParser(prog="python -m rankflow.bench.baseline")
    p.add_argument("--brokers", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--redis", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--variant", choices=sorted(VARIANTS), default="full",
                   help="full: the seed's design with playback records; lean: user records only (default: full)")
    p.add_argument("--follow", action="store_true", help="keep consuming (until --expect events)")
    p.add_argument("--expect", type=int, default=0, help="with --follow: stop after this many events")
    p.add_argument("--sample-every", type=int, default=0)
    p.add_argument("--samples-out", help="write [(partition, offset), applied_time] pairs here")
    a = p.parse_args(argv)
    baseline = Baseline(a.redis, a.namespace, a.variant)
    result = baseline.consume(a.brokers, a.topic, until_eof=not a.follow, sample_every=a.sample_every,
                              stop=lambda r: bool(a.expect) and r.events >= a.expect)
    if a.samples_out:
        with open(a.samples_out, "wb") as f:
            f.write(orjson.dumps([[list(k), v] for k, v in result.applied_at.items()]))
    print(f"{result.events} events in {result.seconds:.2f}s, {result.invalid} invalid, "
          f"{result.conflicts} conflicts", file=sys.stderr)
    return 0

if __name__ == "__main__":
    sys.exit(main())
