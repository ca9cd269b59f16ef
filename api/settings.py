"""What ``rankflow serve`` is configured with (:class:`Settings`): the shared service's and each
mounted product's, which its serve parts read (``Product.serve_parts``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from rankflow import products as product_registry
from rankflow.api import http_cache, ingest, server
from rankflow.connectors.kafka import KafkaEndpoint
from rankflow.connectors.redis_keys import DEFAULT_NAMESPACE, DEFAULT_REDIS_URL


@dataclass
class Settings:
    redis_url: str = DEFAULT_REDIS_URL
    read_urls: tuple[str, ...] = ()  # replicas the readers read, in order (--redis-read); the primary last
    namespace: str = DEFAULT_NAMESPACE
    kafka: KafkaEndpoint | None = None  # where POST /events produces; None disables ingest
    score_kafka: KafkaEndpoint | None = None  # where POST /matches/{id}/result produces; None disables it
    signing_key: bytes | None = field(default=None, repr=False)  # match results must be signed with it
    delivery_timeout_ms: int = 5000
    producer_queue_messages: int | None = None  # the producer's local queue; None: librdkafka's default
    max_body_bytes: int = ingest.DEFAULT_MAX_BODY_BYTES  # a longer POST /events body is a 413
    ingest_token: str | None = field(default=None, repr=False)  # POST /events needs it as a Bearer token
    poll_ms: int = 1000  # how often a reader asks Redis for a newer snapshot unasked (announced ones: at once)
    board_index: str = "redis"  # board queries: "redis" (a script per query) or "memory" (api.board_mirror)
    stale_after_ms: int = 10_000  # a ranking older than this is marked stale
    cache_max_age_s: int = http_cache.DEFAULT_MAX_AGE_S  # Cache-Control: public, max-age=N of the reads (0: no-cache)
    body_timeout_ms: int = server.DEFAULT_BODY_TIMEOUT_MS  # a request body must arrive within this of its head (408)
    products: tuple[str, ...] = tuple(product_registry.PRODUCTS)  # what is mounted (``Product.serve_parts``): all
