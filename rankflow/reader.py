"""Reading rankings the way every reader should: fresh when possible, stale when not.

While Redis has no usable ranking (it lost its data, a rebuild is under way from an
empty namespace, or Redis is unreachable) a reader says so, and can still show the
last ranking it saw, marked stale with its age. The CLI keeps that last ranking in
a small cache file; the HTTP API keeps it in memory.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import redis
from redis.connection import parse_url

from rankflow.connectors.redis_contact import NotRedis, first_contact
from rankflow.connectors.redis_keys import connect
from rankflow.connectors.redis_publish import dumps_document, loads_document
from rankflow.connectors.redis_read import read_latest
from rankflow.connectors.redis_replicas import sync_reader
from rankflow.options import redacted


@dataclass
class Reading:
    snapshot: dict[str, Any] | None
    stale: bool
    problem: str | None  # why the ranking is not fresh, or None

    @property
    def age_ms(self) -> int | None:
        if self.snapshot is None:
            return None
        return max(0, int(time.time() * 1000) - int(self.snapshot["published_at"]))


def default_cache_path(url: str, namespace: str) -> Path:
    """Where ``rankflow top`` keeps the last ranking it read from ``namespace`` of the Redis at ``url``.

    Keyed by both, so a Redis that is down is never answered with a ranking read from
    another one; the name is a hash of the key, so a namespace such as ``../x`` or
    ``a/b`` never becomes a path.

    >>> default_cache_path("redis://u:pw@h:6379/0", "ns") == default_cache_path("redis://h", "ns")
    True
    >>> default_cache_path("redis://h/0", "ns") != default_cache_path("redis://h/1", "ns")
    True
    >>> default_cache_path("redis://h", "../../x").parent.name
    'rankflow'
    """
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    key = orjson.dumps([redis_identity(url), namespace])
    return Path(base) / "rankflow" / f"{hashlib.sha256(key).hexdigest()[:32]}.json"


def redis_identity(url: str) -> str:
    """The server and database ``url`` names, without its credentials or other options:
    ``host:port/db``, or ``unix:PATH/db`` for a socket (the defaults filled in)."""
    try:
        parts = parse_url(url)
    except ValueError:  # not a Redis URL: connecting fails too, and no cached ranking matches it
        return redacted(url)
    db = parts.get("db", 0)
    if "path" in parts:
        return f"unix:{parts['path']}/{db}"
    return f"{parts.get('host', 'localhost')}:{parts.get('port', 6379)}/{db}"


class RankingReader:
    def __init__(self, url: str, namespace: str, cache_path: Path | None = None,
                 read_urls: Sequence[str] = (), first_contact: bool = False) -> None:
        """Reads ``namespace`` of the Redis at ``url``, or of its replicas ``read_urls``
        (``connectors.redis_replicas``); the cached ranking is the primary's either way.
        ``first_contact``: check first that ``url`` is a Redis that answers (``redis_contact``,
        about 2 s at most), as a command does; without replicas only."""
        self._first_contact = first_contact and not read_urls
        self._url = url
        self._read_urls = read_urls
        self._namespace = namespace
        self._cache_path = cache_path
        self._last: dict[str, Any] | None = None

    def read(self) -> Reading:
        try:
            if self._first_contact:
                first_contact(self._url)
            client = sync_reader(self._url, self._read_urls, connect)
            try:
                snap = read_latest(client, self._namespace)
            finally:
                client.close()
        except NotRedis as exc:
            return self._fallback(str(exc))
        except redis.RedisError as exc:
            return self._fallback(f"cannot reach Redis at {redacted(self._url)}: {exc}")
        if snap is None:
            return self._fallback(f"no usable ranking in namespace {self._namespace!r}")
        self._remember(snap)
        return Reading(snap, stale=False, problem=None)

    def _remember(self, snap: dict[str, Any]) -> None:
        self._last = snap
        if self._cache_path is not None:
            try:
                self._cache_path.parent.mkdir(parents=True, exist_ok=True)
                tmp = self._cache_path.with_suffix(".tmp")
                tmp.write_bytes(dumps_document(snap))  # exact: a watermark may pass 64 bits
                tmp.replace(self._cache_path)
            except OSError:
                pass  # a cache is a convenience; never fail a read because of it

    def _fallback(self, problem: str) -> Reading:
        last = self._last
        if last is None and self._cache_path is not None:
            try:
                last = loads_document(self._cache_path.read_bytes())
            except (OSError, ValueError):
                last = None
        return Reading(last, stale=last is not None, problem=problem)
