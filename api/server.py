"""Serving the app to clients that may be slow on purpose: bounds on a request's head, its
body and the connections held (``rankflow serve --header-timeout-ms --body-timeout-ms
--max-connections``).

uvicorn bounds none of them by itself: a connection that sends half a request head is
held as long as the client likes (the keep-alive timeout only runs between requests and
stops at the next byte), the head may grow without limit (httptools sets none), a body
may trickle forever, and any number of such connections may be open: a few hundred
slow clients (slowloris) hold every slot. So:

* :func:`bounded_protocol`: uvicorn's HTTP protocol with a deadline on each request
  head, from the connection's start or the previous response's end, and a size bound on
  it (:data:`MAX_HEAD_BYTES`, ``431``). A head that comes too late is a ``408`` (or a
  silent close when nothing of it came: an idle keep-alive connection).
* :class:`BoundedBodies`: ASGI middleware that bounds the wait for a body: the whole
  body must arrive within the bound after its head, else ``408`` and the connection closes.
* ``--max-connections``: uvicorn's ``limit_concurrency``; a request on a connection
  beyond it is answered ``503``.

An answer given before the request's body was read whole (a refusal: ``401``, ``413``,
``415``, ``503``, a ``404`` or ``405`` of a ``POST``...) closes the connection
(:class:`BoundedBodies` adds ``Connection: close``), and the protocol closes it so that the
client reads that answer and then the end of the stream (:meth:`BoundedHeads._close_after_answer`):
the rest of the body is never read as the next request, and no reset takes the answer away.

The same protocol answers a plain keep-alive ``GET`` whose answer is ready
(``api.prepared``) itself, before any ASGI request is built: the bounds hold for it as for
every other request.

The bounds never cut an answer being sent: an event stream lives as long as its client.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson

from rankflow.api.prepared import PreparedAnswers

DEFAULT_HEADER_TIMEOUT_MS = 10_000
DEFAULT_BODY_TIMEOUT_MS = 30_000
DEFAULT_MAX_CONNECTIONS = 1000
MAX_HEAD_BYTES = 64 * 1024
"""A request line and headers longer than this are a ``431`` (h11's own bound is 16 KiB)."""
LINGER_IDLE_S = 5.0
LINGER_MAX_S = 30.0
"""After an answer that closes the connection while the request is still coming in, what
the client still sends is read and dropped until it closes its side, until nothing came for
:data:`LINGER_IDLE_S`, or for :data:`LINGER_MAX_S` at most: only then is the connection
closed (:meth:`BoundedHeads._linger`)."""


def raw_response(status: int, reason: str, error: str) -> bytes:
    """A whole HTTP/1.1 error answer with the project's ``{"error"}`` body, closing the connection."""
    body = orjson.dumps({"error": error})
    return (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
            % (status, reason.encode(), len(body))) + body


class _Answered:
    """What uvicorn's protocol reads of the request cycle of a prepared answer: a complete one."""

    response_complete = True
    disconnected = False
    keep_alive = True
    message_event = asyncio.Event()  # set by connection_lost; nobody waits on it


ANSWERED = _Answered()


def bounded_protocol(header_timeout_s: float, max_head_bytes: int = MAX_HEAD_BYTES,
                     base: type[asyncio.Protocol] | None = None,
                     prepared: PreparedAnswers | None = None) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class (``base``; by default httptools, or h11 without it) with
    a deadline and a size bound on each request head. It only uses what both of uvicorn's
    protocols have: the current request's ``cycle`` (set once a head is complete),
    ``on_response_complete``. With ``prepared`` and httptools, a request it has ready is
    answered here (:meth:`BoundedHeads._answer_prepared`). With httptools (which the
    service's dependencies install) a connection closed before its request's body was read
    lingers (:meth:`BoundedHeads._close_after_answer`); h11's protocol closes it at once."""
    if base is None:
        from uvicorn.protocols.http.auto import AutoHTTPProtocol as base  # uvicorn only when serving
    if prepared is not None and not _parses_with_httptools(base):  # type: ignore[arg-type]  # set above
        prepared = None  # h11's protocol parses otherwise: every request takes the ASGI path
    late = raw_response(408, "Request Timeout", f"the request head did not arrive within {header_timeout_s:g} s")
    too_long = raw_response(431, "Request Header Fields Too Large",
                            f"the request head is longer than {max_head_bytes} bytes")

    class BoundedHeads(base):  # type: ignore[valid-type, misc]
        cycle: Any  # uvicorn's request cycle; ANSWERED after a prepared answer
        _head_timer: asyncio.TimerHandle | None = None
        _head_bytes = 0  # received while no request ran
        _heads_begun = _heads_done = 0  # httptools' callbacks: a pipelined head begun during a request
        _messages_done = 0  # httptools' too: requests read whole, body and all
        _lingering = False  # the answer is written and the write side shut: what comes is dropped
        _linger_timer: asyncio.TimerHandle | None = None
        _linger_last = _linger_end = 0.0

        def on_message_begin(self) -> None:
            self._heads_begun += 1
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            self._heads_done += 1
            if prepared is None or not self._answer_prepared(prepared):
                cycle = self.cycle
                super().on_headers_complete()
                if self.cycle is not cycle and _has_body(self.headers):
                    # uvicorn closes the cycle's transport after an answer with Connection: close
                    self.cycle.transport = _CloseAfterAnswer(self.transport, self._close_after_answer)

        def on_message_complete(self) -> None:
            self._messages_done += 1
            super().on_message_complete()

        def _answer_prepared(self, answers: PreparedAnswers) -> bool:
            """Write the answer of a request that ``answers`` has ready, as uvicorn would write it
            (its default headers, then Starlette's and the validators ``api.http_cache.CacheHeaders``
            adds), or its ``304`` when the request's ``If-None-Match`` holds its tag
            (:meth:`PreparedAnswers.reply`); False for the ASGI path: anything but a plain
            keep-alive HTTP/1.1 ``GET`` without a body, a request behind another one still running
            (pipelined), a client not reading its answers, the connection limit reached, an
            access log to write, a ``root_path``."""
            parser = self.parser
            cycle = self.cycle
            if parser.get_method() != b"GET" or parser.get_http_version() != "1.1" \
                    or not parser.should_keep_alive() or parser.should_upgrade() or self.expect_100_continue \
                    or (cycle is not None and not cycle.response_complete) or self.flow.write_paused \
                    or self.access_log or self.root_path or _has_body(self.headers) or self._over_limit():
                return False
            path, _, query = self.url.partition(b"?")
            if b"%" in path:  # to decode: the ASGI path does it
                return False
            if_none_match = None
            for name, value in self.headers:
                if name == b"if-none-match":  # several lines are one list (api.http_cache)
                    if_none_match = value if if_none_match is None else if_none_match + b", " + value
            try:
                reply = answers.reply(path.decode("ascii"), query, if_none_match, self.url if query else path)
            except UnicodeDecodeError:
                return False
            if reply is None:
                return False
            status, rest, body = reply
            head = status + _joined_defaults(self.server_state.default_headers) + rest
            if len(body) > JOIN_BELOW:
                self.transport.writelines((head, body))  # one system call, the body not copied
            else:
                self.transport.write(head + body)
            self.cycle = ANSWERED
            self.on_response_complete()
            return True

        def _over_limit(self) -> bool:
            limit = self.limit_concurrency
            return limit is not None and (len(self.connections) >= limit or len(self.tasks) >= limit)

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._expect_head()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            if self._linger_timer is not None:
                self._linger_timer.cancel()
            super().connection_lost(exc)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self._lingering:
                self._unset_keepalive_if_required()  # the linger's own bounds hold
            elif not self.transport.is_closing():
                self._expect_head()  # the next request's head has the same time

        def data_received(self, data: bytes) -> None:
            if self._lingering:
                self._linger_last = self.loop.time()  # the refused rest: dropped unparsed
                return
            if self._awaiting_head():
                self._head_bytes += len(data)
            super().data_received(data)
            if not self._awaiting_head():
                self._head_bytes = 0  # a head was complete: its request runs
            elif self._head_bytes > max_head_bytes and not self.transport.is_closing():
                self._refuse(too_long)

        def _awaiting_head(self) -> bool:
            cycle = self.cycle
            return cycle is None or cycle.response_complete

        def _expect_head(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._head_bytes = 0
            self._head_timer = self.loop.call_later(header_timeout_s, self._head_late)

        def _head_late(self) -> None:
            self._head_timer = None
            if self._awaiting_head() and not self.transport.is_closing():
                if self._head_bytes or self._heads_begun > self._heads_done:
                    self._refuse(late)
                else:
                    self.transport.close()  # an idle connection: nothing to answer

        def _refuse(self, answer: bytes) -> None:
            self.transport.write(answer)
            self._linger()  # the head may still be coming

        def _close_after_answer(self) -> None:
            """uvicorn's close of the connection after the answer to a request with a body (one
            with ``Connection: close``, or an app that failed): at once when the request was
            read whole; else linger (:meth:`_linger`), since closing a socket with unread bytes
            sends a reset, which may reach the client before it read the answer, and the
            client's system then drops the answer (a 10 MB body sent in one go did)."""
            transport = self.transport
            if transport.is_closing() or self._lingering:
                return
            if self._messages_done >= self._heads_begun:
                transport.close()
            else:
                self._linger()

        def _linger(self) -> None:
            """Shut the write side once the answer is written (the client reads the answer, then
            the end of the stream), drop what the client still sends, and close when the client
            closes its side (uvicorn's ``eof_received`` lets the transport close then: nothing is
            left unread, so it is a clean close) or at the bounds of :data:`LINGER_IDLE_S` and
            :data:`LINGER_MAX_S`. Also after the protocol's own ``408`` and ``431``, whose head
            may still be coming."""
            transport = self.transport
            if transport.is_closing() or self._lingering:
                return
            if not transport.can_write_eof():  # TLS has no half-close
                transport.close()
                return
            self._lingering = True
            self._unset_keepalive_if_required()  # uvicorn's idle close: the linger's bounds replace it
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            transport.write_eof()
            self.flow.resume_reading()
            self._linger_last = now = self.loop.time()
            self._linger_end = now + LINGER_MAX_S
            self._linger_timer = self.loop.call_at(now + LINGER_IDLE_S, self._linger_check)

        def _linger_check(self) -> None:
            now = self.loop.time()
            if now >= self._linger_end or now - self._linger_last >= LINGER_IDLE_S:
                self._linger_timer = None
                self.transport.close()
            else:
                self._linger_timer = self.loop.call_at(min(self._linger_last + LINGER_IDLE_S, self._linger_end),
                                                       self._linger_check)

    return BoundedHeads


JOIN_BELOW = 2048
"""A prepared answer's body up to this size is joined to its head and written as one piece; a
larger one (a top of 100: some 8 KB) is written beside it (``writelines``: one ``writev`` with
uvloop) rather than copied again."""
_DEFAULTS: list[Any] = [None, b""]
"""The last default headers uvicorn's server set (its own list) and their lines, joined once."""


def _joined_defaults(headers: list[tuple[bytes, bytes]]) -> bytes:
    """uvicorn's default headers (``server``, ``date``) as header lines, as its protocol writes them
    for every answer. uvicorn sets a new list of them once a second (the date), so they are joined
    once per list, not per prepared answer: the list kept here is the server's own, so a list
    that replaced it is never mistaken for it."""
    if headers is not _DEFAULTS[0]:
        _DEFAULTS[:] = headers, b"".join(b"%s: %s\r\n" % header for header in headers)
    joined: bytes = _DEFAULTS[1]
    return joined


class _CloseAfterAnswer:
    """The transport uvicorn writes the answer of a request with a body on: its ``close`` is
    the protocol's ``_close_after_answer``, all else the connection's transport."""

    __slots__ = ("_transport", "close")

    def __init__(self, transport: asyncio.Transport, close: Callable[[], None]) -> None:
        self._transport = transport
        self.close = close

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def _parses_with_httptools(protocol: type[asyncio.Protocol]) -> bool:
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # no httptools: uvicorn's h11 protocol
        return False
    return issubclass(protocol, HttpToolsProtocol)


class BodyTooSlow(Exception):
    """The body did not arrive within the bound (raised out of ``receive``)."""


class BoundedBodies:
    """Pure ASGI middleware: a request's body must arrive within ``timeout_s`` of its head,
    and an answer that starts before the app read the body whole closes the connection.

    Only requests that declare a body are bounded (a ``Content-Length`` or a chunked
    ``Transfer-Encoding``): an event stream's later waits for the client to leave are
    no body. A late body is a ``408`` and the connection closes (the rest of the body
    would otherwise be read as the next request).

    Any other answer the app starts before it received the last of the body (a refusal
    of ingest: ``401``, ``415``, ``413``, ``503`` unconfigured; a ``404`` or ``405``) gets
    ``Connection: close``, for the same reason; uvicorn then closes the connection after
    it (the protocol makes that close clean: ``BoundedHeads._close_after_answer``). An
    answer after the whole body was read (``202``, ``400``, a broker's ``503``) keeps the
    connection.

    A body refused before the app read it closes the connection whatever its size, even
    when all of it had already arrived: whether it had is a matter of timing, which neither
    the app nor the client sees, and one rule a client can rely on is worth a reconnection
    after a refusal. Reading the body to keep the connection instead would make a refused
    client's whole upload cost the service, and hold the refusal back until it ends."""

    def __init__(self, app: Any, timeout_s: float) -> None:
        self.app = app
        self.timeout_s = timeout_s

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not _has_body(scope["headers"]):
            await self.app(scope, receive, send)
            return
        deadline = asyncio.get_running_loop().time() + self.timeout_s
        body_done = started = False

        async def bounded_receive() -> dict[str, Any]:
            nonlocal body_done
            if body_done:
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise BodyTooSlow from None
            body_done = message["type"] != "http.request" or not message.get("more_body", False)
            return message

        async def noting_send(message: dict[str, Any]) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if not body_done and not _closes(message.get("headers", ())):
                    message = {**message, "headers": [*message.get("headers", ()), (b"connection", b"close")]}
            await send(message)

        try:
            await self.app(scope, bounded_receive, noting_send)
        except BodyTooSlow:
            if started:
                raise
            body = orjson.dumps({"error": f"the request body did not arrive within {self.timeout_s:g} s"})
            await send({"type": "http.response.start", "status": 408,
                        "headers": [(b"content-type", b"application/json"), (b"connection", b"close"),
                                    (b"content-length", b"%d" % len(body))]})
            await send({"type": "http.response.body", "body": body})


def _closes(headers: Any) -> bool:
    """Whether answer ``headers`` have ``Connection: close``."""
    return any(name.lower() == b"connection" and b"close" in value.lower() for name, value in headers)


def _has_body(headers: list[tuple[bytes, bytes]]) -> bool:
    for name, value in headers:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() not in (b"0", b"")):
            return True
    return False


def server_config(app: Any, host: str, port: int, header_timeout_ms: int = DEFAULT_HEADER_TIMEOUT_MS,
                  max_connections: int = DEFAULT_MAX_CONNECTIONS, **options: Any) -> Any:
    """uvicorn's configuration with the bounds (the body's is the app's: ``Settings.body_timeout_ms``)
    and the app's prepared answers (``app.state.prepared``, if it has them).

    ``limit_concurrency`` counts the connection being served too: N + 1 serves N."""
    import uvicorn

    prepared = getattr(app.state, "prepared", None)
    return uvicorn.Config(app, host=host, port=port, http=bounded_protocol(header_timeout_ms / 1000, prepared=prepared),
                          limit_concurrency=max_connections + 1, h11_max_incomplete_event_size=MAX_HEAD_BYTES,
                          **options)
