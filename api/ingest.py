"""``POST /events``: players and playback services hand events to Kafka through here.

Contract:

* With an ingest token (``rankflow serve --ingest-token``), a request without
  ``Authorization: Bearer TOKEN`` is refused with ``401`` before its body is read.
  Without one, anyone who can reach the port can write events.
* The body is one event (a JSON object) or a JSON array of events, declared
  ``Content-Type: application/json`` (else ``415``: a web page cannot make a browser
  send that without the service's consent, which it never gives). A request is
  checked in this order, and stops at the first failure: media type, size (``413``
  as soon as the declared ``Content-Length`` or the bytes read pass the body limit,
  so at most the limit plus one chunk is ever held), the array's structure, count (at
  most ``MAX_EVENTS_PER_REQUEST`` events, ``400 too_many``), then every event. The
  count is checked before any event is validated.
* Every event is judged by the flow's own check (``state.events.check_event``, docs/semantics/listeners.md
  section 1) on its bytes as the client wrote them, which are what is produced: never
  re-encoded (that would round an integer beyond 64 bits and fail on deep nesting), so
  ingest accepts an event exactly when the flow would. If any is invalid, the answer is
  ``400`` with a reason per invalid event, and nothing of the request is produced: a
  client fixes the request and sends it again.
* Valid events are produced keyed by ``user_id`` with ``acks=all`` and idempotence.
  The answer is ``202`` only once the broker acknowledged every one of them, with
  the partition and offset of each; a player that gets no ``202`` retries the same
  events, which the counting rules make harmless.
* ``503`` (with ``Retry-After``) when the broker does not acknowledge within the
  delivery timeout, or the producer's local queue stays full that long. Waiting
  for room in the queue yields to the event loop, so other requests go on.
* A refusal given before the body was read whole (``401``, ``415``, ``413``, the
  ``503`` of a service without a broker) closes the connection (``Connection: close``,
  ``api.server.BoundedBodies``): the rest of the body is dropped, never read as the
  next request. Answers after the whole body (``202``, ``400``, the broker's ``503``)
  keep it.

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
from typing import Any, NamedTuple

from confluent_kafka import KafkaError, Message
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel

from rankflow.api.schemas import Accepted, Error, Responses, model
from rankflow.api.schemas_listeners import EventsRefused, events_body
from rankflow.connectors.kafka import KafkaEndpoint, reliable_producer
from rankflow.state.events import INVALID_JSON, InvalidEvent, check_event
from rankflow.state.json_spans import WHITESPACE, array_items

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
        self._producer = reliable_producer(endpoint.brokers, endpoint.settings, **config)
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
        return [{"partition": f"{m.topic()}/{m.partition()}", "offset": m.offset()}
                for m in results if not isinstance(m, BaseException)]  # none is, after the check above

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


class Items(NamedTuple):
    """A body's items, each as the client wrote it; ``single`` when the body is one item
    (not an array), whose being no JSON is then the body's problem (``index`` null)."""

    items: list[bytes]
    single: bool
    problem: dict[str, Any] | None  # the body's as a whole: not an array of values, empty, too many

    def problem_index(self, i: int, reason: str) -> int | None:
        """The ``index`` a problem of item ``i`` names (not ``tuple.index``)."""
        return None if self.single and reason == INVALID_JSON else i


def body_items(body: bytes, limit: int) -> Items:
    """A body's items (one value, or an array of them), or the problem with the body as a whole.

    Only the array's own structure is read (``state.json_spans``): whether an item is
    JSON is for the flow's parser to say, item by item, so no depth or number an item
    may hold is judged here otherwise than by the flow.
    """
    try:
        items = array_items(body)
    except ValueError as exc:
        return Items([], False, {"index": None, "reason": INVALID_JSON, "detail": f"not a JSON array: {exc}"})
    single = items is None
    if items is None:
        items = [body.strip(WHITESPACE)] if body.strip(WHITESPACE) else []
    if not items:
        return Items([], single, {"index": None, "reason": "empty", "detail": "nothing in the request"})
    if len(items) > limit:
        return Items([], single, {"index": None, "reason": "too_many", "detail": f"at most {limit} in one request"})
    return Items(items, single, None)


def check_events(body: bytes) -> tuple[Records, list[dict[str, Any]]]:
    """Valid records to produce, and the reasons of the invalid events (with their index).

    Each event is judged by the flow's own check (``state.events.check_event``) on the
    very bytes that are produced: ingest accepts an event exactly when the flow would."""
    events = body_items(body, MAX_EVENTS_PER_REQUEST)
    if events.problem is not None:
        return [], [events.problem]
    records, problems = [], []
    for i, raw in enumerate(events.items):
        try:
            user_id = check_event(raw)[0]
        except InvalidEvent as exc:
            problems.append({"index": events.problem_index(i, exc.reason), "reason": exc.reason, "detail": exc.detail})
            continue
        records.append((user_id.encode(), raw))
    return records, problems


def events_to_produce(body: bytes) -> Checked:
    records, problems = check_events(body)
    if problems:
        return [], {"error": "invalid events; nothing was produced", "invalid": problems}
    return records, None


def refuse_media_type(content_type: str | None) -> JSONResponse | None:
    """The ``415`` for a body that is not declared ``application/json`` (UTF-8).

    A web page can make a browser post a "simple" request (``text/plain``, a form)
    to any address without asking first; ``application/json`` needs the browser to
    ask the service (a CORS preflight), which it never grants. So no page can post
    events through a visitor's browser, token or not."""
    media, _, params = (content_type or "").partition(";")
    charset = params.lower().replace('"', "").replace(" ", "")
    if media.strip().lower() == "application/json" and charset in ("", "charset=utf-8"):
        return None
    return JSONResponse({"error": f"the body must be sent as 'Content-Type: application/json', "
                                  f"got {content_type!r}"}, status_code=415)


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
    """The answer of an ingest route: token (401), media type (415), size (413), ``check`` (400), then
    ``202`` once the broker acknowledged every record, or ``503``. Shared by ``POST
    /events`` and ``POST /matches/{match_id}/result``, which differ only in ``check``."""
    if producer is None:
        return JSONResponse({"error": f"ingest is not configured: {unconfigured}"}, status_code=503)
    settings = request.app.state.settings
    refused = refuse_credentials(settings.ingest_token, credentials) or \
        refuse_media_type(request.headers.get("content-type"))
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


def ingest_responses(refused: type[BaseModel], what: str) -> Responses:
    """The OpenAPI answers of an ingest route; ``refused`` is its ``400``'s body."""
    return {202: model(Accepted, "the broker acknowledged every record: where each one is"),
            400: model(refused, what),
            401: model(Error, "the service has an ingest token and the request lacks it, or names another",
                       headers={"WWW-Authenticate": {"schema": {"type": "string"}, "description": "Bearer"}}),
            413: model(Error, "the body is longer than the service's limit (--max-body-bytes)"),
            415: model(Error, "the body is not declared 'Content-Type: application/json'"),
            503: model(Error, "the broker did not acknowledge, or the producer's queue stayed full, within the "
                              "delivery timeout (with Retry-After); or the service has no broker for this route",
                       headers={"Retry-After": {"schema": {"type": "integer"},
                                                "description": "seconds, when the broker did not acknowledge"}})}


@router.post("/events", status_code=202, summary="Hand playback events to Kafka",
             responses=ingest_responses(EventsRefused, "invalid events (or more than 10,000), none produced"),
             openapi_extra=events_body(MAX_EVENTS_PER_REQUEST))
async def post_events(request: Request,
                      credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> JSONResponse:
    return await produce_request(request, credentials, request.app.state.producer, events_to_produce,
                                 "start the service with --kafka")
