"""The ASGI application: ``create_app`` wires the routes to their services.

Routes: ``POST /events`` (ingest, ``api.ingest``), ``GET /rankings``,
``GET /songs/{song_id}``, ``GET /rankings/stream`` (``api.rankings``), the score boards
``GET /boards...`` (``api.boards``, ``api.board_stream``), ``POST
/matches/{match_id}/result`` (``api.match_results``), the activity rankings ``GET
/activity``, ``GET /activity/global/top``, ``GET /activity/{workspace}/top``, ``GET
/activity/{workspace}/channels/{channel}``, ``GET /activity/{workspace}/stream`` and
their query forms for any ids (``api.activity``), ``GET /health``, ``GET /metrics``,
and the dashboard at ``GET /`` (``api.dashboard``). Each product's routes are mounted when
``Settings.products`` names it (``rankflow serve --products``; all by default). The OpenAPI
schema is at ``/openapi.json``, browsable at ``/docs``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from fastapi import FastAPI, Request, Response
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from rankflow import products as product_registry
from rankflow.api import dashboard, ingest, rankings, responses, server
from rankflow.api.activity_watch import ActivityWatch
from rankflow.api.board_mirror import BoardMirror, MirroredBoards
from rankflow.api.board_watch import BoardWatch
from rankflow.api.shared_cache import SharedTops
from rankflow.api.store import SnapshotCache
from rankflow.connectors.activity_read import AsyncActivityReader
from rankflow.connectors.board_read import AsyncBoardReader
from rankflow.connectors.kafka import KafkaEndpoint
from rankflow.connectors.redis_keys import DEFAULT_NAMESPACE, DEFAULT_REDIS_URL

log = logging.getLogger("rankflow.api")


@dataclass
class Settings:
    redis_url: str = DEFAULT_REDIS_URL
    namespace: str = DEFAULT_NAMESPACE
    kafka: KafkaEndpoint | None = None  # where POST /events produces; None disables ingest
    score_kafka: KafkaEndpoint | None = None  # where POST /matches/{id}/result produces; None disables it
    signing_key: bytes | None = field(default=None, repr=False)  # match results must be signed with it
    delivery_timeout_ms: int = 5000
    producer_queue_messages: int | None = None  # the producer's local queue; None: librdkafka's default
    max_body_bytes: int = ingest.DEFAULT_MAX_BODY_BYTES  # a longer POST /events body is a 413
    ingest_token: str | None = field(default=None, repr=False)  # POST /events needs it as a Bearer token
    poll_ms: int = 100  # how often the service asks Redis for a newer snapshot
    board_index: str = "redis"  # board queries: "redis" (a script per query) or "memory" (api.board_mirror)
    stale_after_ms: int = 10_000  # a ranking older than this is marked stale
    body_timeout_ms: int = server.DEFAULT_BODY_TIMEOUT_MS  # a request body must arrive within this of its head (408)
    products: tuple[str, ...] = tuple(product_registry.PRODUCTS)  # whose routes are mounted (``Product.routers``): all


class ApiMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("rankflow_api_requests", "HTTP requests", ["route", "status"],
                                registry=self.registry)
        self.latency = Histogram("rankflow_api_request_seconds", "HTTP request latency", ["route"],
                                 buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
                                 registry=self.registry)


def create_app(settings: Settings) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        cache = SnapshotCache(settings.redis_url, settings.namespace, settings.poll_ms)
        await cache.start()
        app.state.cache = cache
        app.state.producer = producer = start_producer(settings, settings.kafka)
        app.state.score_producer = score_producer = start_producer(settings, settings.score_kafka)
        boards_client = aioredis.Redis.from_url(settings.redis_url, socket_connect_timeout=2, socket_timeout=2)
        app.state.boards = AsyncBoardReader(boards_client, settings.namespace)
        app.state.board_watch = app.state.board_changes = BoardWatch(boards_client, settings.namespace,
                                                                     settings.poll_ms)
        app.state.board_watch.start()
        app.state.board_mirror = None
        if settings.board_index == "memory":
            app.state.board_mirror = mirror = BoardMirror(boards_client, settings.namespace, settings.poll_ms)
            mirror.start()
            app.state.boards = MirroredBoards(mirror, app.state.boards)
            app.state.board_changes = mirror  # streams wake when the mirror serves a new snapshot
        app.state.board_tops = SharedTops(app.state.boards, app.state.board_changes)
        activity_client = aioredis.Redis.from_url(settings.redis_url, socket_connect_timeout=2, socket_timeout=2)
        app.state.activity = AsyncActivityReader(activity_client, settings.namespace)
        app.state.activity_watch = ActivityWatch(app.state.activity, settings.poll_ms)
        app.state.activity_watch.start()
        app.state.activity_tops = SharedTops(app.state.activity, app.state.activity_watch)
        try:
            yield
        finally:
            await cache.stop()
            await app.state.board_watch.stop()
            await app.state.activity_watch.stop()
            await close_within(activity_client, 5)
            if app.state.board_mirror is not None:
                await app.state.board_mirror.stop()
            await close_within(boards_client, 5)
            for p in (producer, score_producer):
                if p is not None:
                    p.close()

    app = FastAPI(title="rankflow", summary="Songs ranked by current listeners, game score boards, "
                                            "channels ranked by activity in a sliding window",
                  lifespan=lifespan)
    app.state.settings = settings
    app.state.stopping = threading.Event()  # set by the server at Ctrl-C: event streams end
    app.state.bodies = rankings.BodyCache()
    metrics = ApiMetrics()

    @app.get("/health", summary="Redis reachable, age of the latest snapshot (the boards' and the activity "
                                "rankings' snapshot ids too)")
    async def health(request: Request) -> Response:
        cache: SnapshotCache = request.app.state.cache
        redis_ok = await cache.ping()
        snap = cache.snapshot
        age = None if snap is None else max(0, int(time.time() * 1000) - snap["published_at"])
        listeners_ok = cache.fresh and age is not None and age <= settings.stale_after_ms
        version = request.app.state.board_watch.version
        boards_id = None if version is None or version[1] is None else int(version[1])
        activity_version = request.app.state.activity_watch.version
        activity_id = None if activity_version is None else activity_version[1]
        # a boards-only (or activity-only) deployment has no listener snapshot: its health is the others'
        ok = redis_ok and (listeners_ok or (snap is None and (boards_id is not None or activity_id is not None)))
        body = {"status": "ok" if ok else "degraded", "redis": "ok" if redis_ok else "unreachable",
                "snapshot_id": None if snap is None else snap["snapshot_id"], "snapshot_age_ms": age,
                "problem": cache.problem, "boards_snapshot_id": boards_id, "board_index": settings.board_index,
                "activity_snapshot_id": activity_id}
        mirror = request.app.state.board_mirror
        if mirror is not None:  # informs, never degrades: until it serves, Redis answers the board queries
            served = mirror.version
            body["board_mirror"] = {"ready": mirror.ready, "problem": mirror.problem,
                                    "snapshot_id": None if served is None or served[1] is None else int(served[1])}
        return responses.json_response(body, 200 if ok else 503)

    @app.get("/metrics", summary="Prometheus metrics of this service")
    async def prometheus(request: Request) -> Response:
        body = generate_latest(metrics.registry)
        cache = request.app.state.cache
        body += queue_gauge("producer", "Events in the POST /events producer's local queue",
                            request.app.state.producer)
        body += queue_gauge("score_producer", "Match results in the POST /matches producer's local queue",
                            request.app.state.score_producer)
        body += (b"# HELP rankflow_api_table_loads_total Whole count tables read from Redis (else changes)\n"
                 b"# TYPE rankflow_api_table_loads_total counter\n"
                 b"rankflow_api_table_loads_total %d\n"
                 b"# HELP rankflow_api_table_songs Songs with listeners in this process's count table\n"
                 b"# TYPE rankflow_api_table_songs gauge\n"
                 b"rankflow_api_table_songs %d\n") % (cache.table_loads, len(cache.table))
        mirror = request.app.state.board_mirror
        if mirror is not None:
            body += (b"# HELP rankflow_api_board_loads_total Whole loads of the boards into memory (else changes)\n"
                     b"# TYPE rankflow_api_board_loads_total counter\n"
                     b"rankflow_api_board_loads_total %d\n"
                     b"# HELP rankflow_api_board_entries Board entries held in memory (--board-index memory)\n"
                     b"# TYPE rankflow_api_board_entries gauge\n"
                     b"rankflow_api_board_entries %d\n") % (mirror.loads, mirror.entries())
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    routers = [router for name in settings.products for router in product_registry.get(name).routers()]
    for router in routers:
        app.include_router(router)
    app.include_router(dashboard.router)
    app.add_middleware(server.BoundedBodies, timeout_s=settings.body_timeout_ms / 1000)
    app.add_middleware(MeasureRequests, metrics=metrics)  # outside: it counts the 408 of a late body
    default_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            responses.drop_422(default_openapi(), [route for router in routers for route in router.routes])  # caches it
        return app.openapi_schema  # type: ignore[return-value]

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def queue_gauge(name: str, what: str, producer: ingest.EventProducer | None) -> bytes:
    """A producer's queue as a Prometheus gauge: how far the broker is behind (none without ingest)."""
    if producer is None:
        return b""
    metric = f"rankflow_api_{name}_queue_messages"
    return (f"# HELP {metric} {what}, not yet acknowledged by the broker\n# TYPE {metric} gauge\n"
            f"{metric} {producer.queued}\n").encode()


def start_producer(settings: Settings, endpoint: KafkaEndpoint | None) -> ingest.EventProducer | None:
    if endpoint is None:
        return None
    if settings.ingest_token is None:
        log.warning("ingest is open: anyone who can reach this port can write events to %s; set --ingest-token",
                    endpoint)
    return ingest.EventProducer(endpoint, settings.delivery_timeout_ms, settings.producer_queue_messages)


async def close_within(client: aioredis.Redis, timeout_s: float) -> None:
    """Close a client's connections without letting a stalled Redis hold the shutdown."""
    closing = asyncio.ensure_future(client.aclose())
    _, pending = await asyncio.wait({closing}, timeout=timeout_s)
    if pending:
        log.warning("Redis connections did not close in time")


class MeasureRequests:
    """Pure ASGI middleware: request count and latency per route template.

    (Starlette's ``@app.middleware("http")`` wraps every response in a stream and
    costs more than the ranking handler itself.)
    """

    def __init__(self, app: Any, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_status(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            name = getattr(scope.get("route"), "path", "other")
            self.metrics.latency.labels(name).observe(time.perf_counter() - started)
            self.metrics.requests.labels(name, str(status)).inc()
