"""``POST /events``: players and playback services hand events to Kafka through here.

Contract:

* With an ingest token (``rankflow serve --ingest-token``), a request without
  ``Authorization: Bearer TOKEN`` is refused with ``401`` before its body is read.
  Without one, anyone who can reach the port can write events.
* The body is one event (a JSON object) or a JSON array of events. A request is
  checked in this order, and stops at the first failure: size (``413`` as soon as
  the declared ``Content-Length`` or the bytes read pass the body limit, so at most
  the limit plus one chunk is ever held), parse, count (at most
  ``MAX_EVENTS_PER_REQUEST`` events, ``400 too_many``), then every event. Parsing
  is bounded by the size limit; the count is checked before any event is validated.
* Every event is validated by the same rules as the flow (SEMANTICS.md section 1).
  If any is invalid, the answer is ``400`` with a reason per invalid event, and
  nothing of the request is produced: a client fixes the request and sends it again.
* Valid events are produced keyed by ``user_id`` with ``acks=all`` and idempotence.
  The answer is ``202`` only once the broker acknowledged every one of them, with
  the partition and offset of each; a player that gets no ``202`` retries the same
  events, which the counting rules make harmless.
* ``503`` (with ``Retry-After``) when the broker does not acknowledge within the
  delivery timeout, or the producer's local queue stays full that long. Waiting
  for room in the queue yields to the event loop, so other requests go on.

The machinery (token, body limit, the producer that answers only once the broker
acknowledged: :func:`produce_request`) also serves the match servers' ``POST
/matches/{match_id}/result`` (``api.match_results``); the routes differ only in how
a body becomes records.
"""

from __future__ import annotations

import asyncio
import hmac
import threading
from collections.abc import Callable
from typing import Any

import orjson
from confluent_kafka import KafkaError, Message
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from rankflow.connectors.kafka import KafkaEndpoint, reliable_producer
from rankflow.state.events import InvalidEvent, validate

MAX_EVENTS_PER_REQUEST = 10_000
DEFAULT_MAX_BODY_BYTES = 1 << 20
QUEUE_FULL_RETRY_S = 0.005  # soon enough to take a freed slot, rare enough to cost waiting requests nothing


class BrokerUnavailable(RuntimeError):
    pass


class EventProducer:
    """An idempotent producer whose deliveries resolve asyncio futures."""

    def __init__(self, endpoint: KafkaEndpoint, delivery_timeout_ms: int = 5000,
                 queue_messages: int | None = None) -> None:
        self.endpoint = endpoint
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        config: dict[str, object] = {
            "linger.ms": 2,
            "message.timeout.ms": delivery_timeout_ms,
            "socket.connection.setup.timeout.ms": min(delivery_timeout_ms, 5000),
        }
        if queue_messages is not None:
            config["queue.buffering.max.messages"] = queue_messages
        self._producer = reliable_producer(endpoint.brokers, **config)
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll, name="ingest-producer-poll", daemon=True)
        self._poller.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            self._producer.poll(0.05)

    @property
    def queued(self) -> int:
        """Messages in the local queue, not yet acknowledged: how far the broker is behind."""
        return len(self._producer)

    async def send(self, records: list[tuple[bytes, bytes]]) -> list[dict[str, Any]]:
        """Produce ``(key, value)`` records; return their positions once all are acknowledged."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.delivery_timeout_s
        futures: list[asyncio.Future[Message]] = []
        try:
            for key, value in records:
                futures.append(await self._produce(key, value, loop, deadline))
        except BrokerUnavailable:
            _abandon(futures)
            raise
        results = await asyncio.gather(*futures, return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            raise BrokerUnavailable(str(failures[0]))
        return [{"partition": f"{m.topic()}/{m.partition()}", "offset": m.offset()} for m in results]

    async def _produce(self, key: bytes, value: bytes, loop: asyncio.AbstractEventLoop,
                       deadline: float) -> asyncio.Future[Message]:
        """Queue one record; while the local queue is full, give the loop to other
        requests (the poller thread drains the queue) until ``deadline``."""
        future: asyncio.Future[Message] = loop.create_future()

        def delivered(err: KafkaError | None, msg: Message) -> None:
            outcome: Any = BrokerUnavailable(str(err)) if err is not None else msg
            loop.call_soon_threadsafe(_settle, future, outcome)

        while True:
            try:
                self._producer.produce(self.endpoint.topic, key=key, value=value, on_delivery=delivered)
                return future
            except BufferError:
                if loop.time() >= deadline:
                    raise BrokerUnavailable(
                        f"the producer's local queue stayed full for {self.delivery_timeout_s:g} s") from None
                await asyncio.sleep(QUEUE_FULL_RETRY_S)

    def close(self) -> None:
        self._producer.flush(10)
        self._stop.set()
        self._poller.join(timeout=5)


def _settle(future: asyncio.Future[Message], outcome: Any) -> None:
    if future.done():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


def _abandon(futures: list[asyncio.Future[Message]]) -> None:
    """Drop the deliveries of a request answered ``503`` before they all settled: the
    client sends the events again, and a failure nobody awaits must not be logged
    as an exception never retrieved."""
    for future in futures:
        if future.done():
            future.exception()
        else:
            future.cancel()


async def read_body(request: Request, limit: int) -> bytes | None:
    """The body, or ``None`` as soon as it is known to be longer than ``limit`` bytes:
    a declared ``Content-Length`` says so before anything is read, and the bytes are
    counted as they arrive (a chunked body declares no length), so an oversized body
    is never held whole."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


Records = list[tuple[bytes, bytes]]
"""``(key, value)`` pairs to produce."""

Checked = tuple[Records, "dict[str, Any] | None"]
"""What a request's check gives: the records to produce, or the body of its ``400`` (then none)."""


def as_batch(parsed: Any, limit: int) -> tuple[list[Any], dict[str, Any] | None]:
    """A body's items (one, or an array of them), or the problem with their count."""
    items = parsed if isinstance(parsed, list) else [parsed]
    if not items:
        return [], {"index": None, "reason": "empty", "detail": "nothing in the request"}
    if len(items) > limit:
        return [], {"index": None, "reason": "too_many", "detail": f"at most {limit} in one request"}
    return items, None


def check_events(body: bytes) -> tuple[Records, list[dict[str, Any]]]:
    """Valid records to produce, and the reasons of the invalid events (with their index)."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return [], [{"index": None, "reason": "invalid_json", "detail": str(exc)}]
    events, problem = as_batch(parsed, MAX_EVENTS_PER_REQUEST)
    if problem is not None:
        return [], [problem]
    records, problems = [], []
    for i, event in enumerate(events):
        raw = orjson.dumps(event)
        try:
            user_id = validate(event, raw)[0]
        except InvalidEvent as exc:
            problems.append({"index": i, "reason": exc.reason, "detail": exc.detail})
            continue
        records.append((user_id.encode(), raw))
    return records, problems


def events_to_produce(body: bytes) -> Checked:
    records, problems = check_events(body)
    if problems:
        return [], {"error": "invalid events; nothing was produced", "invalid": problems}
    return records, None


def refuse_credentials(expected: str | None, given: HTTPAuthorizationCredentials | None) -> JSONResponse | None:
    """The ``401`` for a request without the ingest token (``None`` when it may write).
    The comparison takes the same time wherever the tokens differ, so the answer's
    timing does not reveal how much of a guess was right."""
    if expected is None:
        return None
    if given is None:
        return JSONResponse({"error": "this route needs the header 'Authorization: Bearer <ingest token>'"},
                            status_code=401, headers={"WWW-Authenticate": "Bearer"})
    if not hmac.compare_digest(given.credentials.encode(), expected.encode()):
        return JSONResponse({"error": "the ingest token is wrong"}, status_code=401,
                            headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})
    return None


bearer = HTTPBearer(auto_error=False, description="the ingest token, when the service has one (--ingest-token)")
router = APIRouter()


async def produce_request(request: Request, credentials: HTTPAuthorizationCredentials | None,
                          producer: EventProducer | None, check: Callable[[bytes], Checked],
                          unconfigured: str) -> JSONResponse:
    """The answer of an ingest route: token (401), size (413), ``check`` (400), then
    ``202`` once the broker acknowledged every record, or ``503``. Shared by ``POST
    /events`` and ``POST /matches/{match_id}/result``, which differ only in ``check``."""
    if producer is None:
        return JSONResponse({"error": f"ingest is not configured: {unconfigured}"}, status_code=503)
    settings = request.app.state.settings
    refused = refuse_credentials(settings.ingest_token, credentials)
    if refused is not None:
        return refused
    body = await read_body(request, settings.max_body_bytes)
    if body is None:
        return JSONResponse({"error": f"the body is longer than {settings.max_body_bytes} bytes; "
                                      "send it in smaller requests"}, status_code=413)
    records, refusal = check(body)
    if refusal is not None:
        return JSONResponse(refusal, status_code=400)
    try:
        positions = await producer.send(records)
    except BrokerUnavailable as exc:
        return JSONResponse({"error": f"Kafka did not acknowledge: {exc}"}, status_code=503,
                            headers={"Retry-After": "1"})
    return JSONResponse({"accepted": len(records), "positions": positions}, status_code=202)


def ingest_responses(what: str) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI answers of an ingest route."""
    return {400: {"description": what},
            401: {"description": "the service has an ingest token and the request lacks it"},
            413: {"description": "the body is longer than the service's limit (--max-body-bytes)"},
            503: {"description": "the broker did not acknowledge, or the producer's queue stayed "
                                 "full, within the delivery timeout"}}


@router.post("/events", status_code=202, summary="Hand playback events to Kafka",
             responses=ingest_responses("invalid events (or more than 10,000), none produced"))
async def post_events(request: Request,
                      credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> JSONResponse:
    return await produce_request(request, credentials, request.app.state.producer, events_to_produce,
                                 "start the service with --kafka")
