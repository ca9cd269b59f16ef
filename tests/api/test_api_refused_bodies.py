"""A body the service refuses before reading it whole, against a real ``rankflow serve`` over a
raw socket: the client writes the head and a 10 MB body in one go, without waiting, and reads
exactly one answer, the refusal with ``Connection: close``, then the end of the stream. The
rest of the body is never read as a next request (once a ``431`` of a head "longer than
65536 bytes"), and no reset cuts the client's upload or takes the answer away. An answer
after the whole body was read keeps the connection, and so does an accepted request."""

from __future__ import annotations

import threading

import orjson
import pytest

from rankflow.connectors.kafka import ensure_topic
from tests.api.raw_http import Connection, Response
from tests.api.test_ingest import EVENT, served

BIG = 10 << 20
TOKEN = "s3cret"
AUTH = b"Authorization: Bearer %s\r\n" % TOKEN.encode()
JSON = b"Content-Type: application/json\r\n"


def request(head: bytes, body: bytes, path: bytes = b"/events") -> bytes:
    return b"POST %s HTTP/1.1\r\nHost: rankflow\r\n%sContent-Length: %d\r\n\r\n%s" % (path, head, len(body), body)


def chunked(head: bytes, body: bytes, chunk: int = 1 << 20) -> bytes:
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + chunk]), body[i:i + chunk]) for i in range(0, len(body), chunk))
    return b"POST /events HTTP/1.1\r\nHost: rankflow\r\n%sTransfer-Encoding: chunked\r\n\r\n%s0\r\n\r\n" % (head, chunks)


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def refused_then_closed(port: int, data: bytes) -> Response:
    """Write ``data`` on a new connection from a thread, all of it at once, while reading: the one
    answer, which must close the connection, and nothing after it but a clean end of stream.
    The upload must end without error (the server drops the rest, never resets)."""
    conn = Connection(port)
    failed: list[OSError] = []

    def upload() -> None:
        try:
            conn.sock.sendall(data)
        except OSError as exc:
            failed.append(exc)

    writer = threading.Thread(target=upload, name="test-upload")
    writer.start()
    try:
        answer = conn.response()
        assert ("connection", "close") in answer.headers, answer.headers
        try:
            after = conn.until_eof()
        except ConnectionResetError:
            pytest.fail(f"the server reset the connection after its {answer.status}")
        assert after == b"", f"a second answer after the {answer.status}: {after[:200]!r}"
        writer.join(timeout=30)
        assert not writer.is_alive(), "the upload still blocks: the server stopped reading the refused body"
        assert not failed, f"the upload failed after the {answer.status}: {failed}"
    finally:
        writer.join(timeout=30)
        conn.close()
    return answer


def error_of(answer: Response) -> str:
    return orjson.loads(answer.body)["error"]


def test_a_refused_body_gets_one_answer_then_a_clean_close(tmp_path, kafka_brokers, topic, redis_url):
    ensure_topic(kafka_brokers, topic, 1)
    big = b" " * BIG
    with served("--kafka", f"{kafka_brokers}/{topic}", "--redis", redis_url, log=tmp_path / "serve.log",
                token_env=TOKEN) as url:
        port = port_of(url)
        answer = refused_then_closed(port, request(AUTH + JSON, big))
        assert answer.status == 413 and "longer than 1048576 bytes" in error_of(answer)
        answer = refused_then_closed(port, chunked(AUTH + JSON, big))
        assert answer.status == 413, "a chunked body, refused once its bytes passed the limit"
        answer = refused_then_closed(port, request(AUTH + b"Content-Type: text/plain\r\n", big))
        assert answer.status == 415 and "application/json" in error_of(answer)
        answer = refused_then_closed(port, request(JSON, big))
        assert answer.status == 401 and ("www-authenticate", "Bearer") in answer.headers
        answer = refused_then_closed(port, request(JSON, orjson.dumps(EVENT)))
        assert answer.status == 401, "a small body refused unread closes the connection too"
        answer = refused_then_closed(port, request(AUTH + JSON, big, path=b"/rankings"))
        assert answer.status == 405, "a route that reads no body"
        conn = Connection(port)  # the service serves on
        try:
            conn.sock.sendall(request(AUTH + JSON, orjson.dumps(EVENT)))
            assert conn.response().status == 202
        finally:
            conn.close()


def test_ingest_not_configured_refuses_a_body_with_one_answer_then_a_clean_close(tmp_path, redis_url):
    with served("--redis", redis_url, log=tmp_path / "serve.log") as url:
        answer = refused_then_closed(port_of(url), request(JSON, b" " * BIG))
        assert answer.status == 503 and "ingest is not configured" in error_of(answer)


def test_answers_after_the_whole_body_keep_the_connection(tmp_path, kafka_brokers, topic, redis_url):
    """Accepted events, then invalid ones (a ``400``: the body was read), then a ``GET``, all on
    one connection: each answered, none closing it."""
    ensure_topic(kafka_brokers, topic, 1)
    with served("--kafka", f"{kafka_brokers}/{topic}", "--redis", redis_url, log=tmp_path / "serve.log") as url:
        conn = Connection(port_of(url))
        try:
            answers = []
            for body in (orjson.dumps(EVENT), orjson.dumps([{**EVENT, "type": "PAUSE"}]),
                         orjson.dumps({**EVENT, "user_id": "u2"})):
                conn.sock.sendall(request(JSON, body))
                answers.append(conn.response())
            answers += conn.get("/openapi.json")
            assert [a.status for a in answers] == [202, 400, 202, 200], [a.body[:200] for a in answers]
            assert all(name != "connection" for a in answers for name, _ in a.headers), \
                [a.headers for a in answers]
        finally:
            conn.close()
