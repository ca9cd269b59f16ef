"""A product's share of ``rankflow serve`` besides its routes: its background parts.

Contract: ``Product.serve_parts(settings)`` lists :class:`Part` objects, built without I/O.
The app starts every mounted product's parts before it answers (:meth:`Part.start`, which
puts on ``app.state`` what the product's routes read), stops them at shutdown
(:meth:`Part.stop`, in bounded time), and asks them what ``GET /health``
(:meth:`Part.health`), ``GET /readyz`` (:meth:`Part.unready`) and ``GET /metrics``
(:meth:`Part.metrics`) report. The app names no product: what it knows of one is what its
parts say.

``/health``'s status (``api.app``) is ``ok`` when Redis answers, no part is degraded
(:attr:`Health.serving` False: a snapshot it serves is stale) and at least one serves a
current snapshot (True); a product with nothing published (None) does not degrade the
service as long as another serves (a boards-only deployment).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import redis
import redis.asyncio as aioredis

from rankflow.api.watch import wait_bounded
from rankflow.connectors.redis_replicas import AsyncFailoverRedis, ReadRoute

if TYPE_CHECKING:
    from rankflow.api.ingest import EventProducer
    from rankflow.api.settings import Settings
    from rankflow.connectors.kafka import KafkaEndpoint

log = logging.getLogger("rankflow.api")


@dataclass
class Health:
    """What one part tells ``/health``: its ``fields`` (in the body, in the part's order),
    whether it serves a current snapshot (``serving``: True; None: nothing published; False:
    degraded), and ``informs``: fields that never degrade, written after every part's ``fields``."""

    fields: dict[str, Any]
    serving: bool | None = None
    informs: dict[str, Any] = field(default_factory=dict)


class Part:
    """One background piece of a product in ``rankflow serve``; the defaults do nothing."""

    async def start(self, state: Any) -> None:
        """Start, and put on ``state`` (``app.state``) what the product's routes read."""

    async def stop(self) -> None:
        """Stop in bounded time (the shutdown must not wait on a stalled Redis)."""

    def health(self) -> Health | None:
        """What ``/health`` reports of it; None: nothing."""
        return None

    def unready(self) -> str | None:
        """Why the product cannot answer its reading routes from a usable snapshot (``GET
        /readyz``: the product's "no usable ..." reason), or None when it can. Asks Redis
        nothing: it says what the part's background reader last saw."""
        return None

    def metrics(self) -> bytes:
        """Its lines of ``/metrics`` (Prometheus text format)."""
        return b""


def redis_client(url: str) -> aioredis.Redis:
    """A part's connections to Redis: a stalled Redis fails a read in seconds, never hangs it."""
    return aioredis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)


def read_client(state: Any) -> aioredis.Redis:
    """A part's client for reading snapshots: from the replicas of ``--redis-read`` first, the
    primary last (``state.read_route``, ``connectors.redis_replicas``); without replicas, the
    primary's client as before."""
    route: ReadRoute = state.read_route
    if not route.replicas:
        return redis_client(route.primary.url)
    return AsyncFailoverRedis(route, redis_client)


def read_metrics(route: ReadRoute) -> bytes:
    """``/metrics``'s lines of the endpoints the readers read (with ``--redis-read``): the commands
    each answered, each replica's skips by reason and whether it is skipped now."""
    lines = ["# HELP rankflow_api_redis_reads_total Readers' Redis commands, by the endpoint that answered",
             "# TYPE rankflow_api_redis_reads_total counter"]
    lines += [f'rankflow_api_redis_reads_total{{endpoint="{e.name}",role="{"replica" if e.replica else "primary"}"}} '
              f"{e.reads}" for e in route.endpoints]
    lines += ["# HELP rankflow_api_redis_read_skips_total Times a replica was found down or refusing, and the "
              "read went to the next endpoint",
              "# TYPE rankflow_api_redis_read_skips_total counter"]
    lines += [f'rankflow_api_redis_read_skips_total{{endpoint="{e.name}",reason="{reason}"}} {count}'
              for e in route.replicas for reason, count in e.skips.items()]
    lines += ["# HELP rankflow_api_redis_read_skipped 1 while a replica is skipped (found down or refusing "
              "less than a few seconds ago), else 0",
              "# TYPE rankflow_api_redis_read_skipped gauge"]
    lines += [f'rankflow_api_redis_read_skipped{{endpoint="{e.name}"}} {int(route.skipped(e))}'
              for e in route.replicas]
    return ("\n".join(lines) + "\n").encode()


async def close_client(client: aioredis.Redis | None) -> None:
    """Close a client's connections without letting a stalled Redis hold the shutdown."""
    if client is not None:
        await wait_bounded(asyncio.ensure_future(client.aclose()), "Redis connections did not close in time")


async def ping(client: aioredis.Redis) -> bool:
    """Whether Redis answers (``/health``)."""
    try:
        return bool(await client.ping())
    except (redis.RedisError, OSError):
        return False


def gauge(name: str, what: str, value: int, kind: str = "gauge") -> bytes:
    """One Prometheus metric ``rankflow_api_<name>`` with its help line."""
    metric = f"rankflow_api_{name}"
    return f"# HELP {metric} {what}\n# TYPE {metric} {kind}\n{metric} {value}\n".encode()


class ProducerPart(Part):
    """A Kafka producer a product's POST route writes to (``api.ingest.EventProducer``), kept
    on ``state.<attr>`` (None without an endpoint: the route answers that it is disabled)."""

    def __init__(self, settings: Settings, endpoint: KafkaEndpoint | None, attr: str, what: str) -> None:
        self.settings, self.endpoint, self.attr, self.what = settings, endpoint, attr, what
        self.producer: EventProducer | None = None

    async def start(self, state: Any) -> None:
        if self.endpoint is not None:
            from rankflow.api.ingest import EventProducer

            if self.settings.ingest_token is None:
                log.warning("ingest is open: anyone who can reach this port can write events to %s; set "
                            "--ingest-token", self.endpoint)
            self.producer = EventProducer(self.endpoint, self.settings.delivery_timeout_ms,
                                          self.settings.producer_queue_messages)
        setattr(state, self.attr, self.producer)

    async def stop(self) -> None:
        if self.producer is not None:
            self.producer.close()

    def metrics(self) -> bytes:
        """The producer's queue: how far the broker is behind (nothing without a producer)."""
        if self.producer is None:
            return b""
        return gauge(f"{self.attr}_queue_messages", f"{self.what}, not yet acknowledged by the broker",
                     self.producer.queued)
