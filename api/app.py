"""The ASGI application: ``create_app`` wires the routes to their services."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fastapi import FastAPI

from api import ingest, rankings
from connectors.kafka import KafkaEndpoint
from connectors.redis_snapshots import DEFAULT_NAMESPACE, DEFAULT_REDIS_URL
from rankflow.reader import RankingReader


@dataclass
class Settings:
    redis_url: str = DEFAULT_REDIS_URL
    namespace: str = DEFAULT_NAMESPACE
    kafka: KafkaEndpoint | None = None  # where POST /events produces; None disables ingest
    delivery_timeout_ms: int = 5000


def create_app(settings: Settings) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        producer = None
        if settings.kafka is not None:
            producer = ingest.EventProducer(settings.kafka, settings.delivery_timeout_ms)
        app.state.producer = producer
        try:
            yield
        finally:
            if producer is not None:
                producer.close()

    app = FastAPI(title="rankflow", summary="Songs ranked by current listeners", lifespan=lifespan)
    app.state.settings = settings
    app.state.reader = RankingReader(settings.redis_url, settings.namespace)
    app.include_router(ingest.router)
    app.include_router(rankings.router)
    return app
