"""Where snapshots live in Redis, how they get there, and how readers get them.

Key layout for a namespace ``ns`` (the ``{ns}`` hash tag keeps every key of a
namespace in one Redis Cluster slot, so the publish script may touch them all):

==========================  ===============================================
``{ns}:fence``              run token: ``INCR``-ed by every run at start-up
``{ns}:snapshot``           the latest published snapshot (JSON)
``{ns}:snapshot_id``        its id, compared by the publish script
``{ns}:snapshots``          a stream of every published snapshot (capped)
==========================  ===============================================

Publishing is one Lua script, atomic in Redis: it refuses a writer whose run token
is not the current fence (a stale run: :class:`FencedError`), ignores a snapshot
whose id is not newer than the stored one (a retry), and otherwise replaces the
snapshot and appends it to the stream. Readers never see half of a snapshot.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson
import redis
from bytewax.outputs import DynamicSink, StatelessSinkPartition

from state.snapshot import Snapshot

log = logging.getLogger("rankflow.publisher")

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_NAMESPACE = "rankflow"
STREAM_MAXLEN = 10_000

PUBLISH_LUA = """
local fence = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) ~= fence then
  return redis.error_reply('FENCED run ' .. ARGV[1] .. ' is not the owner; current owner is run ' .. fence)
end
local current = tonumber(redis.call('GET', KEYS[2]) or '-1')
if tonumber(ARGV[2]) <= current then
  return 0
end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('SET', KEYS[3], ARGV[3])
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[4], '*', 'snapshot_id', ARGV[2], 'snapshot', ARGV[3])
return 1
"""


class FencedError(RuntimeError):
    """A newer run owns the namespace; this one must stop publishing."""


class Keys:
    def __init__(self, namespace: str) -> None:
        if not namespace or "}" in namespace or "{" in namespace:
            raise ValueError(f"invalid namespace {namespace!r}: non-empty, without braces")
        tag = "{" + namespace + "}"
        self.fence = f"{tag}:fence"
        self.snapshot = f"{tag}:snapshot"
        self.snapshot_id = f"{tag}:snapshot_id"
        self.stream = f"{tag}:snapshots"


def connect(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=10)


def acquire_run_token(client: redis.Redis, namespace: str) -> int:
    """Take the namespace for this run: every older run is fenced from now on."""
    return int(client.incr(Keys(namespace).fence))


def read_latest(client: redis.Redis, namespace: str) -> dict[str, Any] | None:
    raw = client.get(Keys(namespace).snapshot)
    return None if raw is None else orjson.loads(raw)


def read_history(client: redis.Redis, namespace: str) -> list[dict[str, Any]]:
    """Every snapshot still in the stream, oldest first."""
    return [orjson.loads(fields[b"snapshot"]) for _, fields in client.xrange(Keys(namespace).stream)]


class Publisher:
    """Publishes snapshots of one run, retrying while Redis is unreachable."""

    def __init__(self, url: str, namespace: str, run_token: int, retry_for_s: float = 300.0) -> None:
        self._client = connect(url)
        self._keys = Keys(namespace)
        self._script = self._client.register_script(PUBLISH_LUA)
        self._token = run_token
        self._retry_for_s = retry_for_s

    def publish(self, snapshot: Snapshot) -> bool:
        """True if stored, False if Redis already had a newer snapshot."""
        deadline = time.monotonic() + self._retry_for_s
        delay = 0.1
        while True:
            body = orjson.dumps(snapshot.to_json_obj(int(time.time() * 1000)))
            try:
                return bool(self._call(snapshot.snapshot_id, body))
            except redis.ConnectionError as exc:
                if time.monotonic() + delay > deadline:
                    raise
                log.warning("Redis unreachable (%s); retrying snapshot %s in %.1fs",
                            exc, snapshot.snapshot_id, delay)
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    def _call(self, sid: int, body: bytes) -> Any:
        k = self._keys
        try:
            return self._script(
                keys=[k.fence, k.snapshot_id, k.snapshot, k.stream],
                args=[self._token, sid, body, STREAM_MAXLEN],
            )
        except redis.ResponseError as exc:
            if "FENCED" in str(exc):
                raise FencedError(str(exc).replace("FENCED ", "")) from None
            raise

    def close(self) -> None:
        self._client.close()


class _PublisherPartition(StatelessSinkPartition[tuple[str, Snapshot]]):
    def __init__(self, publisher: Publisher) -> None:
        self._publisher = publisher

    def write_batch(self, items: list[tuple[str, Snapshot]]) -> None:
        for _, snapshot in items:
            self._publisher.publish(snapshot)

    def close(self) -> None:
        self._publisher.close()


class RedisSnapshotSink(DynamicSink[tuple[str, Snapshot]]):
    """Bytewax sink publishing the merger's ``(key, Snapshot)`` items."""

    def __init__(self, url: str, namespace: str, run_token: int) -> None:
        self._args = (url, namespace, run_token)

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _PublisherPartition:
        return _PublisherPartition(Publisher(*self._args))
