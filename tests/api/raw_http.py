"""``rankflow serve``'s server in a thread (``api.server.server_config``: its protocol, bounds and
prepared answers) and a raw HTTP/1.1 client that sees the bytes it writes, pipelining included,
and whether the server closed the connection."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from rankflow.api.server import server_config
from rankflow.services import free_port

from tests.snapshot_stamp import ageless_response


@contextmanager
def in_thread(config_for: Callable[[int], uvicorn.Config]) -> Iterator[int]:
    """A uvicorn server on its own thread and event loop, ``config_for(a free port)``: the port."""
    port = free_port()
    server = uvicorn.Server(config_for(port))
    thread = threading.Thread(target=server.run, name="test-uvicorn", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.02)
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@contextmanager
def served(app: Any, **options: Any) -> Iterator[int]:
    """The app behind the server ``rankflow serve`` runs, on a free port (yielded) of 127.0.0.1."""
    options = {"log_level": "warning", "access_log": False, **options}  # as `rankflow serve` without --access-log
    with in_thread(lambda port: server_config(app, "127.0.0.1", port, **options)) as port:
        yield port


class Response:
    def __init__(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    def without_date(self) -> tuple[int, list[tuple[str, str]], bytes]:
        return self.status, [h for h in self.headers if h[0] != "date"], self.body

    def comparable(self) -> tuple[int, list[tuple[str, str]], bytes]:
        """As :meth:`without_date`, every ``age_ms`` 0 (the moment's: ``tests.snapshot_stamp``)."""
        return ageless_response(self.status, self.headers, self.body)


class Connection:
    """One keep-alive connection; :meth:`get` sends any number of requests in one write."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.buffer = b""

    def get(self, *paths: str) -> list[Response]:
        self.sock.sendall(b"".join(b"GET %s HTTP/1.1\r\nhost: localhost\r\n\r\n" % p.encode() for p in paths))
        return [self._response() for _ in paths]

    def request(self, path: str, *headers: str) -> Response:
        """``GET path`` with the header lines ``headers`` (``"If-None-Match: ..."``, ``"Connection: close"``)."""
        head = "".join(f"{line}\r\n" for line in headers)
        self.sock.sendall(f"GET {path} HTTP/1.1\r\nhost: localhost\r\n{head}\r\n".encode())
        return self._response()

    def response(self) -> Response:
        """The next answer, read whole."""
        return self._response()

    def until_eof(self) -> bytes:
        """What the server sends until it closes the connection cleanly (a reset fails the test)."""
        received, self.buffer = self.buffer, b""
        while chunk := self.sock.recv(65536):
            received += chunk
        return received

    def _read_until(self, marker: bytes) -> bytes:
        while marker not in self.buffer:
            chunk = self.sock.recv(65536)
            assert chunk, "the server closed the connection"
            self.buffer += chunk
        head, _, self.buffer = self.buffer.partition(marker)
        return head

    def _response(self) -> Response:
        head = self._read_until(b"\r\n\r\n").decode()
        status_line, *lines = head.split("\r\n")
        headers = [(name.lower(), value) for name, _, value in (line.partition(": ") for line in lines)]
        status = int(status_line.split(" ")[1])
        length = 0 if status == 304 else int(dict(headers)["content-length"])  # a 304 has no body
        while len(self.buffer) < length:
            chunk = self.sock.recv(65536)
            assert chunk, "the server closed the connection"
            self.buffer += chunk
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return Response(status, headers, body)

    def close(self) -> None:
        self.sock.close()
