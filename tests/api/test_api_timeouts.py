"""Slow clients against a real ``rankflow serve``, over real sockets: a request head or body
that never ends is cut within its bound (``--header-timeout-ms``, ``--body-timeout-ms``),
a head too long is a 431, and connections beyond ``--max-connections`` are answered 503.

The bounds are made small by the options (half a second) while each test waits for the
socket to close for up to :data:`WITHIN` seconds, less than the defaults: a connection
closed in time proves the option took effect, whatever the machine's load."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest

from rankflow.api.server import DEFAULT_BODY_TIMEOUT_MS, DEFAULT_HEADER_TIMEOUT_MS, MAX_HEAD_BYTES
from rankflow.connectors.kafka import ensure_topic
from tests.api.test_ingest import served

BOUND_MS = 500
WITHIN = 8.0
assert WITHIN * 1000 < min(DEFAULT_HEADER_TIMEOUT_MS, DEFAULT_BODY_TIMEOUT_MS)


def connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=WITHIN)


def until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection, which must happen within
    :data:`WITHIN` seconds."""
    received = b""
    deadline = time.monotonic() + WITHIN
    while True:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return received
        except TimeoutError:
            pytest.fail(f"the server still holds the connection after {WITHIN} s: {received!r}")
        if not chunk:
            return received
        received += chunk


def status_and_error(answer: bytes) -> tuple[int, str]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)["error"]


def test_a_request_head_that_never_ends_is_cut(tmp_path, redis_url):
    with served("--redis", redis_url, "--header-timeout-ms", str(BOUND_MS), log=tmp_path / "serve.log") as url:
        with connect(url) as sock:
            started = time.monotonic()
            sock.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: rankflow\r\nX-Slow: ")
            status, error = status_and_error(until_closed(sock))
            assert (status, error) == (408, "the request head did not arrive within 0.5 s")
            assert time.monotonic() - started >= BOUND_MS / 1000 * 0.9, "not before its bound"
        with connect(url) as sock:  # nothing sent at all: closed, nothing to answer
            assert until_closed(sock) == b""
        with connect(url) as sock:  # after an answer, the next head has the same bound
            sock.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: rankflow\r\n\r\nGET /openapi.json HTTP/1.1\r\n")
            answer = until_closed(sock)
            assert answer.startswith(b"HTTP/1.1 200 ") and b"HTTP/1.1 408 " in answer, answer[:200]
        with connect(url) as sock:
            sock.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: rankflow\r\nX-Long: " + b"a" * MAX_HEAD_BYTES)
            assert status_and_error(until_closed(sock))[0] == 431
        assert httpx.get(f"{url}/openapi.json").status_code == 200, "a request in time is served"


def test_a_request_body_that_never_ends_is_cut(tmp_path, redis_url, kafka_brokers, topic):
    ensure_topic(kafka_brokers, topic, 1)
    with served("--redis", redis_url, "--kafka", f"{kafka_brokers}/{topic}", "--body-timeout-ms", str(BOUND_MS),
                log=tmp_path / "serve.log") as url:
        for framing, start in ((b"Content-Length: 100\r\n", b'[{"user_id": '),
                               (b"Transfer-Encoding: chunked\r\n", b'5\r\n[{"us\r\n')):
            with connect(url) as sock:
                started = time.monotonic()
                sock.sendall(b"POST /events HTTP/1.1\r\nHost: rankflow\r\nContent-Type: application/json\r\n"
                             + framing + b"\r\n" + start)
                status, error = status_and_error(until_closed(sock))
                assert (status, error) == (408, "the request body did not arrive within 0.5 s"), framing
                assert time.monotonic() - started >= BOUND_MS / 1000 * 0.9, "not before its bound"
        event = b'{"user_id": "u1", "playback_id": "p1", "song_id": "s", "type": "START", "version": 1, "ts": 5}'
        r = httpx.post(f"{url}/events", content=event, headers={"Content-Type": "application/json"})
        assert r.status_code == 202, r.text


def test_connections_beyond_the_limit_are_answered_503(tmp_path, redis_url):
    with served("--redis", redis_url, "--max-connections", "2", log=tmp_path / "serve.log") as url:
        held = [connect(url) for _ in range(2)]
        for sock in held:
            sock.sendall(b"GET /openapi.json HTTP/1.1\r\n")  # half a head: each holds its slot
        try:
            assert httpx.get(f"{url}/openapi.json").status_code == 503
        finally:
            held.pop().close()
        deadline = time.monotonic() + WITHIN
        while (status := httpx.get(f"{url}/openapi.json").status_code) != 200:  # once the server saw it closed
            assert status == 503 and time.monotonic() < deadline, status
        held.pop().close()
