"""The ASGI application: ``create_app`` mounts the products ``Settings.products`` names
(``rankflow serve --products``; all by default) beside the service's own routes.

Each product brings its routes (``Product.routers``: the listener rankings and ``POST
/events``, the score boards and ``POST /matches/{match_id}/result``, the activity rankings)
and its background parts (``Product.serve_parts``, ``api.parts``: the readers that follow
its snapshots), which this module starts, stops, and asks what ``GET /health`` and ``GET
/metrics`` report; it names no product. Its own routes: ``GET /health``, the orchestrators'
probes ``GET /livez`` and ``GET /readyz``, ``GET /metrics`` and the dashboard at ``GET /``
(``api.dashboard``). The products' prepared answers
(``api.prepared``) are ``app.state.prepared``, for the server's protocol. The OpenAPI schema is at
``/openapi.json``, browsable at ``/docs``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import PlainTextResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from rankflow import products as product_registry
from rankflow.api import dashboard, docs, openapi_cache, responses, schemas, server
from rankflow.api.announce import Announcements
from rankflow.api.bench_control import control_routes
from rankflow.api.hot_reads import HotReads
from rankflow.api.http_cache import CacheHeaders, HttpCache
from rankflow.api.parts import Part, close_client, ping, read_client, read_metrics
from rankflow.api.prepared import PreparedAnswers
from rankflow.api.settings import Settings
from rankflow.connectors.redis_replicas import ReadRoute

__all__ = ["Settings", "create_app"]


class ApiMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("rankflow_api_requests", "HTTP requests", ["route", "status"],
                                registry=self.registry)
        self.latency = Histogram("rankflow_api_request_seconds", "HTTP request latency", ["route"],
                                 buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
                                 registry=self.registry)


def create_app(settings: Settings) -> FastAPI:
    mounted = [product_registry.get(name) for name in settings.products]
    owned: list[tuple[str, Part]] = [(product.name, part) for product in mounted
                                     for part in product.serve_parts(settings)]
    parts = [part for _, part in owned]

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.redis = read_client(app.state)  # /health's ping, where the readers read
        announcements = Announcements(settings.redis_url, route)  # parts follow channels
        app.state.announcements = announcements
        started: list[Part] = []
        try:
            for part in parts:
                await part.start(app.state)
                started.append(part)
            announcements.start()
            yield
        finally:
            await announcements.stop()
            for part in started:
                await part.stop()
            await close_client(app.state.redis)

    summary = ", ".join(product.serves for product in mounted)
    app = FastAPI(title="rankflow", summary=summary[:1].upper() + summary[1:], lifespan=lifespan,
                  docs_url=None, redoc_url=None)  # api.docs: the same pages, with their assets served here
    app.state.settings = settings
    app.add_exception_handler(StarletteHTTPException, responses.http_error)  # {"error"}, as every error
    app.state.read_route = route = ReadRoute(settings.read_urls, settings.redis_url)  # replicas, then --redis
    app.state.stopping = threading.Event()  # set by the server at Ctrl-C: event streams end
    metrics = ApiMetrics()

    @app.get("/health", summary="Redis reachable, age of the latest snapshot (the boards' and the activity "
                                "rankings' snapshot ids too)",
             responses={200: schemas.model(schemas.Health, "every product mounted serves a current snapshot"),
                        503: schemas.model(schemas.Health, "degraded: Redis unreachable, no product mounted has a "
                                                           "snapshot, or the listener ranking is stale")})
    async def health(request: Request) -> Response:
        redis_ok = await ping(request.app.state.redis)
        healths = [h for part in parts if (h := part.health()) is not None]
        body, informs = {}, {}
        for h in healths:
            body.update(h.fields)
            informs.update(h.informs)
        # a product with nothing published does not degrade the service while another serves
        ok = redis_ok and any(h.serving for h in healths) and all(h.serving is not False for h in healths)
        return responses.json_response({"status": "ok" if ok else "degraded",
                                        "redis": "ok" if redis_ok else "unreachable", **body, **informs},
                                       200 if ok else 503)

    @app.get("/livez", summary="Liveness: 200 while the process answers (asks Redis nothing)",
             responses={200: schemas.model(schemas.Live, "the process answers")})
    async def livez() -> Response:
        return responses.json_response({"status": "live"})

    @app.get("/readyz", summary="Readiness: 200 when Redis answers and every product served has a usable snapshot",
             responses={200: schemas.model(schemas.Ready, "Redis answers and every product mounted is ready"),
                        503: schemas.model(schemas.Ready, "not ready: the reason a product's 503 'no usable ...', or "
                                                          "Redis unreachable")})
    async def readyz(request: Request) -> Response:
        return await readiness(request.app.state.redis, owned)

    @app.get("/metrics", summary="Prometheus metrics of this service", response_class=PlainTextResponse,
             responses={200: schemas.text("text/plain", "the Prometheus text format, version 0.0.4 "
                                                        "(docs/metrics.md lists every metric)")})
    async def prometheus(request: Request) -> Response:
        prepared: PreparedAnswers | None = request.app.state.prepared  # None: a server without them
        if prepared is not None:
            prepared.flush()  # its answers since the last read, counted apart (api.prepared)
        body = (generate_latest(metrics.registry) + (b"" if prepared is None else prepared.metrics())
                + b"".join(part.metrics() for part in parts))
        if route.replicas:
            body += read_metrics(route)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    routers = [router for product in mounted for router in product.routers()]
    for router in routers:
        app.include_router(router)
    app.include_router(dashboard.router)
    docs.mount(app)
    app.state.hot_answers = 0
    templates = {route.path_format: route for router in routers for route in router.routes
                 if hasattr(route, "path_format")}
    app.state.http_cache = cache = HttpCache(settings.cache_max_age_s,
                                             [c for product in mounted for c in product.cacheable()])
    app.state.prepared = PreparedAnswers(app.state, [route for product in mounted for route in product.prepared()]
                                         + control_routes(),  # the capacity benchmark's, when it asks
                                         {t: getattr(route, "path", t) for t, route in templates.items()}, metrics,
                                         cache)
    app.add_middleware(HotReads, answers=app.state.prepared, routes=templates)  # innermost: measured like the rest
    app.add_middleware(CacheHeaders, cache=cache,  # the validators of the hot reads' answers too
                       routes=[route for router in routers for route in router.routes if hasattr(route, "path_format")])
    app.add_middleware(server.BoundedBodies, timeout_s=settings.body_timeout_ms / 1000)
    app.add_middleware(MeasureRequests, metrics=metrics)  # outside: it counts the 408 of a late body
    default_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = default_openapi()  # caches it
            responses.drop_422(schema, [route for router in routers for route in router.routes])
            openapi_cache.document_validators(schema, cache.cacheable)
        return app.openapi_schema  # type: ignore[return-value]

    app.openapi = openapi  # type: ignore[method-assign]
    return app


async def readiness(client: Any, owned: list[tuple[str, Part]]) -> Response:
    """``GET /readyz``: Redis answers a ``PING`` now, and each mounted product's readers hold a
    usable snapshot (what they saw at their last look: ``Part.unready``). Unlike ``/health``, a
    product with nothing published makes the service unready: its routes answer ``503``."""
    redis_ok = await ping(client)
    products: dict[str, str] = {}
    for name, part in owned:
        why = part.unready()
        if why is not None or name not in products:
            products[name] = "ready" if why is None else why
    reasons = ([] if redis_ok else ["cannot reach Redis"]) + [f"{name}: {why}" for name, why in products.items()
                                                              if why != "ready"]
    body: dict[str, Any] = {"status": "not ready" if reasons else "ready"}
    if reasons:
        body["reason"] = "; ".join(reasons)
    body.update(redis="ok" if redis_ok else "unreachable", products=products)
    return responses.json_response(body, 503 if reasons else 200)


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
