"""A ``--redis`` URL whose address is not Redis: one line naming what was found, exit 1 (``serve``
too, at its start: a Redis that is down is no reason to refuse to start, an address that is not
Redis is a mistake).

Three real listeners stand at the address: a socket that accepts and never answers, an
HTTP server, and the Kafka broker's port (which reads the ``PING`` as a request's length
and waits for the rest). Each command that reads or writes Redis answers with one line
saying what it found there (``no answer from Redis at HOST:PORT within 2 s``, ``... is not
a Redis server``), never a traceback, never the URL's password. The test waits for the
command's exit with a generous bound and asserts the message, which names the 2 s bound
of the first contact (``connectors.redis_contact``), not how fast it came.
"""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from rankflow.connectors.redis_contact import FIRST_CONTACT_S
from rankflow.services import free_port

RANKFLOW = [sys.executable, "-m", "rankflow.cli"]
SECRET = "hunter2"


@pytest.fixture(scope="module")
def silent() -> Iterator[int]:
    """A port that accepts connections and never says anything."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    server.close()
    for conn in held:
        conn.close()


@pytest.fixture(scope="module")
def http_server() -> Iterator[int]:
    """An HTTP server: it answers anything with an HTTP error page."""
    class Quiet(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def commands(tmp_path: Path) -> dict[str, list[str]]:
    """The commands that contact Redis, each with what it needs but Redis."""
    log = tmp_path / "events.jsonl"
    log.write_bytes(b'{"not": "an event"}\n')
    return {
        "top": ["top"],
        "boards list --json": ["boards", "list", "--json"],
        "activity channel": ["activity", "channel", "--workspace", "acme", "--channel", "general"],
        "status": ["status", "--input", f"jsonl:{log}"],
        "run": ["run", "--input", f"jsonl:{log}", "--until-eof", "--dead-letter", f"jsonl:{tmp_path / 'dead.jsonl'}"],
        "serve": ["serve", "--port", str(free_port())],  # fails at its start, not a service of 503s
    }


def answer(args: list[str], address: str) -> str:
    """The one line a command wrote when its --redis is at ``address`` (a password in the URL), once it exited 1."""
    r = subprocess.run([*RANKFLOW, *args, "--redis", f"redis://:{SECRET}@{address}/0"], capture_output=True,
                       text=True, timeout=15)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and SECRET not in r.stderr + r.stdout, r.stderr
    [line] = r.stderr.splitlines()
    if "--json" in args:
        assert r.stdout == ""
        return orjson.loads(line)["error"]
    return line


WAITED = f"within {FIRST_CONTACT_S:g} s"


@pytest.mark.parametrize("command", ["top", "boards list --json", "activity channel", "status", "run", "serve"])
def test_a_port_that_never_answers(command, silent, tmp_path):
    line = answer(commands(tmp_path)[command], f"127.0.0.1:{silent}")
    assert f"no answer from Redis at 127.0.0.1:{silent} {WAITED}" in line, line
    assert "(not a Redis server, or a stalled one: check --redis)" in line


@pytest.mark.parametrize("command", ["top", "boards list --json", "activity channel", "status", "run", "serve"])
def test_an_http_server(command, http_server, tmp_path):
    line = answer(commands(tmp_path)[command], f"127.0.0.1:{http_server}")
    assert f"127.0.0.1:{http_server} is not a Redis server: it answered in another protocol" in line, line
    assert "as an HTTP server's does" in line


@pytest.mark.parametrize("command", ["boards list --json", "run", "serve"])
def test_the_kafka_brokers_port(command, kafka_brokers, tmp_path):
    line = answer(commands(tmp_path)[command], kafka_brokers.split(",")[0])
    assert f"no answer from Redis at {kafka_brokers.split(',')[0]} {WAITED}" in line, line


def test_a_redis_given_a_password_it_has_no_use_for_is_still_redis(redis_url):
    """Whatever Redis answers in its protocol is Redis: the command goes on and says its own
    one line (here: nothing published), never "not Redis"."""
    url = redis_url.replace("redis://", "redis://:wrong@")
    r = subprocess.run([*RANKFLOW, "boards", "list", "--redis", url], capture_output=True, text=True, timeout=15)
    assert r.returncode == 1 and "not a Redis server" not in r.stderr and "no answer" not in r.stderr, r.stderr
    assert "no usable boards snapshot" in r.stderr, r.stderr
    assert "wrong" not in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr


def test_serve_starts_while_redis_is_down_and_says_so(tmp_path):
    """A refused connection is a Redis not up yet, not a mistake: ``serve`` starts (its routes
    answer ``503`` until Redis answers) with one warning, never a password."""
    import httpx

    from tests.waiting import wait_for

    closed = free_port()  # nothing listens there
    port = free_port()
    err = tmp_path / "serve.stderr"
    with open(err, "wb") as out:
        proc = subprocess.Popen([*RANKFLOW, "serve", "--port", str(port), "--redis",
                                 f"redis://:{SECRET}@127.0.0.1:{closed}/0"], stdout=subprocess.DEVNULL, stderr=out)
    try:
        def live() -> bool:
            assert proc.poll() is None, err.read_text()
            try:
                return httpx.get(f"http://127.0.0.1:{port}/livez", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(live, bool, timeout=30)
        assert httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 503
    finally:
        proc.terminate()
        proc.wait(15)
    text = err.read_text()
    assert f"cannot reach Redis at 127.0.0.1:{closed} now" in text and SECRET not in text, text
