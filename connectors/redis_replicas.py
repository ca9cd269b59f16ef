"""Reading snapshots from Redis replicas: the endpoints a reader asks, in order, and the ones it skips.

Why: every flow writes to the primary (``--redis``); readers (``rankflow serve``, ``top``,
``boards``, ``activity``) only read, so they can take their load off it and read from
replicas (``--redis-read URL``, repeatable). What stays on the primary: every write (the
flows' publish, claim, join and switch scripts, the dead letters) and nothing else; the
flows' announcements (``PUBLISH`` in the publish script) reach a replica's subscribers
through replication, after the writes they announce, so the service subscribes where it
reads (``api.announce``).

Each answer is still one snapshot: every read of a snapshot is one read-only script or one
atomic read (``scripts.READ_*``, declared ``no-writes`` so a replica accepts them under any
configuration), and a replica applies the primary's scripts whole, as they ran. A replica
that lags answers an older whole snapshot, and says which (its id and ``published_at``).

A :class:`ReadRoute` is the replicas in the order given, then the primary as the last
resort. Each command goes to the first endpoint not skipped; one that is down (cannot be
reached, times out) or refusing (``LOADING`` its data, ``MASTERDOWN`` when its link is down
and it runs with ``replica-serve-stale-data no``) is skipped for :data:`SKIP_S` and the
command goes to the next one at once: a reader never waits on a replica it already knows is
down, and never fails while another endpoint answers. The primary is never skipped: its
errors are the reader's, as without replicas. :class:`FailoverRedis` and
:class:`AsyncFailoverRedis` are clients that route every command so (the readers use them
as any client); the route's counts are the service's metrics.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import redis
import redis.asyncio as aioredis
from redis.connection import parse_url

log = logging.getLogger("rankflow.replicas")

READ_URL_ENV = "RANKFLOW_REDIS_READ_URL"
"""The default of ``--redis-read``: URLs separated by commas."""

SKIP_S = 5.0
"""How long an endpoint found down or refusing is skipped before it is asked again."""

REFUSALS = ("LOADING", "MASTERDOWN")
"""Error replies of a replica that cannot answer now: loading its data (a full sync), or its
link to the primary is down and it is set not to serve stale data."""


def read_urls(values: Sequence[str] | None, environ: Mapping[str, str] = os.environ) -> list[str]:
    """The read URLs of ``--redis-read`` (``values``), else of :data:`READ_URL_ENV` (commas
    between them, blanks ignored).

    >>> read_urls(None, {READ_URL_ENV: "redis://a:6379/0, redis://b:6379/0,"})
    ['redis://a:6379/0', 'redis://b:6379/0']
    >>> read_urls(["redis://c/0"], {READ_URL_ENV: "redis://a/0"})
    ['redis://c/0']
    >>> read_urls(None, {})
    []
    """
    if values:
        return list(values)
    return [url.strip() for url in environ.get(READ_URL_ENV, "").split(",") if url.strip()]


def endpoint_name(url: str) -> str:
    """``host:port/db`` (``unix:PATH/db`` for a socket): how logs and metrics name an endpoint,
    never with its credentials.

    >>> endpoint_name("redis://user:secret@replica-1:6380/2")
    'replica-1:6380/2'
    >>> endpoint_name("rediss://replica-2/0")
    'replica-2:6379/0'
    """
    try:
        parts = parse_url(url)
    except ValueError:
        return urlsplit(url).hostname or "?"
    db = parts.get("db", 0)
    if "path" in parts:
        return f"unix:{parts['path']}/{db}"
    return f"{parts.get('host', 'localhost')}:{parts.get('port', 6379)}/{db}"


def skip_reason(exc: BaseException) -> str | None:
    """Why an endpoint that raised ``exc`` is skipped: ``down`` (unreachable, timed out),
    ``refusing`` (:data:`REFUSALS`), or None: an error of the command itself, the reader's.

    >>> skip_reason(redis.ConnectionError("Error 111"))
    'down'
    >>> skip_reason(redis.exceptions.BusyLoadingError("Redis is loading the dataset in memory"))
    'refusing'
    >>> skip_reason(redis.exceptions.MasterDownError("Link with MASTER is down"))
    'refusing'
    >>> skip_reason(redis.ResponseError("ERR wrong number of arguments")) is None
    True
    """
    # redis-py raises its own classes for both refusals (and drops the code from the message)
    if isinstance(exc, (redis.exceptions.BusyLoadingError, redis.exceptions.MasterDownError)):
        return "refusing"
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError, OSError)):
        return "down"
    if isinstance(exc, redis.ResponseError) and str(exc).startswith(REFUSALS):
        return "refusing"
    return None


@dataclass
class Endpoint:
    """One Redis a reader may ask: its URL, its name (:func:`endpoint_name`), whether it is a
    replica, until when it is skipped, and what it did."""

    url: str
    replica: bool
    name: str = ""
    skipped_until: float = 0.0
    reads: int = 0  # commands it answered
    skips: dict[str, int] = field(default_factory=lambda: {"down": 0, "refusing": 0})

    def __post_init__(self) -> None:
        self.name = self.name or endpoint_name(self.url)


class ReadRoute:
    """The replicas in order, then the primary; which are skipped now, and the counts.

    >>> route = ReadRoute(["redis://r1/0", "redis://r2/0"], "redis://p/0")
    >>> [e.name for e in route.candidates()]
    ['r1:6379/0', 'r2:6379/0', 'p:6379/0']
    >>> route.skip(route.endpoints[0], "down", "refused")
    >>> [e.name for e in route.candidates()]
    ['r2:6379/0', 'p:6379/0']
    """

    def __init__(self, replicas: Sequence[str], primary: str, skip_s: float = SKIP_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.endpoints = [Endpoint(url, True) for url in replicas] + [Endpoint(primary, False)]
        self.primary = self.endpoints[-1]
        self.skip_s = skip_s
        self._clock = clock

    @property
    def replicas(self) -> list[Endpoint]:
        return self.endpoints[:-1]

    def candidates(self) -> Iterator[Endpoint]:
        """The endpoints to try, in order: the replicas not skipped now, then the primary."""
        now = self._clock()
        for endpoint in self.endpoints:
            if not endpoint.replica or endpoint.skipped_until <= now:
                yield endpoint

    def first(self) -> Endpoint:
        """Where a reader would go now."""
        return next(self.candidates())

    def failed(self, endpoint: Endpoint, exc: redis.RedisError | OSError) -> None:
        """``endpoint`` failed a read with ``exc``: a replica that may answer later is skipped (the
        read goes on to the next candidate); anything else is the caller's error, raised again.
        The one decision of the sync and async clients."""
        reason = skip_reason(exc)
        if reason is None or not endpoint.replica:
            raise exc
        self.skip(endpoint, reason, exc)

    def skip(self, endpoint: Endpoint, reason: str, exc: object) -> None:
        """``endpoint`` failed (``reason``, :func:`skip_reason`): count it, skip it for a while."""
        endpoint.skips[reason] += 1
        if endpoint.skipped_until == 0.0:  # logged once until it answers again
            log.warning("Redis replica %s is %s (%s: %s): reading from the next one for now", endpoint.name, reason,
                        type(exc).__name__, exc)
        endpoint.skipped_until = self._clock() + self.skip_s

    def answered(self, endpoint: Endpoint) -> None:
        endpoint.reads += 1
        if endpoint.skipped_until:
            endpoint.skipped_until = 0.0
            log.info("Redis replica %s answers again", endpoint.name)

    def skipped(self, endpoint: Endpoint) -> bool:
        return endpoint.replica and endpoint.skipped_until > self._clock()


class FailoverRedis(redis.Redis):
    """A client whose every command goes to its route's first endpoint that answers
    (:class:`ReadRoute`); for readers only (a write would fail on a replica). Pipelines go
    to the route's first endpoint as a whole."""

    def __init__(self, route: ReadRoute, connect: Callable[[str], redis.Redis]) -> None:
        self.route = route
        self.clients = {e.url: connect(e.url) for e in route.endpoints}
        super().__init__(connection_pool=self.clients[route.primary.url].connection_pool)

    def execute_command(self, *args: Any, **options: Any) -> Any:
        for endpoint in self.route.candidates():
            try:
                reply = self.clients[endpoint.url].execute_command(*args, **options)
            except (redis.RedisError, OSError) as exc:
                self.route.failed(endpoint, exc)
                continue
            self.route.answered(endpoint)
            return reply
        raise AssertionError("the primary is always a candidate")  # pragma: no cover

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        return self.clients[self.route.first().url].pipeline(transaction, shard_hint)

    def close(self) -> None:
        for client in self.clients.values():
            client.close()


class AsyncFailoverRedis(aioredis.Redis):
    """:class:`FailoverRedis` for ``asyncio`` readers (the service's)."""

    def __init__(self, route: ReadRoute, connect: Callable[[str], aioredis.Redis]) -> None:
        self.route = route
        self.clients = {e.url: connect(e.url) for e in route.endpoints}
        super().__init__(connection_pool=self.clients[route.primary.url].connection_pool)

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        for endpoint in self.route.candidates():
            try:
                reply = await self.clients[endpoint.url].execute_command(*args, **options)
            except (redis.RedisError, OSError) as exc:
                self.route.failed(endpoint, exc)
                continue
            self.route.answered(endpoint)
            return reply
        raise AssertionError("the primary is always a candidate")  # pragma: no cover

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        return self.clients[self.route.first().url].pipeline(transaction, shard_hint)

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        for client in self.clients.values():
            await client.aclose()


def sync_reader(primary: str, replicas: Sequence[str], connect: Callable[[str], redis.Redis]) -> redis.Redis:
    """A reader's client: ``connect(primary)`` without replicas, else one that reads from them."""
    if not replicas:
        return connect(primary)
    return FailoverRedis(ReadRoute(replicas, primary), connect)
