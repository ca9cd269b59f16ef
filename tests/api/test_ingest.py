"""POST /events and POST /matches/{match_id}/result against a real broker: 202 only after
acknowledgement, 400 with reasons, 503 when the broker cannot acknowledge, and
acknowledged events reach the ranking (and results the boards); the body limit, the
event-count limit, a full producer queue, the ingest token and the signing key."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from rankflow.api.app import Settings, create_app
from rankflow.api.ingest import MAX_EVENTS_PER_REQUEST
from rankflow.api.match_results import MAX_RESULTS_PER_REQUEST
from rankflow.cli import ingest_token
from rankflow.connectors.board_read import BoardReader
from rankflow.connectors.kafka import KafkaEndpoint, ensure_topic
from rankflow.options import RunOptions, UsageError
from rankflow.runner import run
from rankflow.services import free_port
from rankflow.state.score_events import check_score
from tests.api.raw_http import in_thread
from tests import boards_example as example
from tests.boards_model import signature
from tests.events import ranking
from tests.kafka_helpers import read_topic

JSON = {"Content-Type": "application/json"}
"""Ingest takes nothing else (a 415)."""
EVENT = {"user_id": "u1", "playback_id": "p1", "song_id": "song_a", "type": "START", "version": 1, "ts": 5}


def post_json(url: str, content: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    """``httpx.post`` of a JSON body, declared as such."""
    return httpx.post(url, content=content, headers={**JSON, **(headers or {})})


@pytest.fixture
def client(kafka_brokers, topic):
    ensure_topic(kafka_brokers, topic, 2)
    app = create_app(Settings(kafka=KafkaEndpoint(kafka_brokers, topic)))
    with TestClient(app, headers=JSON) as c:
        yield c


def test_accepted_events_are_in_kafka_keyed_by_user(client, kafka_brokers, topic):
    r = client.post("/events", content=orjson.dumps(EVENT))
    assert r.status_code == 202, r.text
    assert r.json()["accepted"] == 1
    batch = [{**EVENT, "user_id": f"u{i}", "playback_id": f"p{i}", "extra": i} for i in range(50)]
    r = client.post("/events", content=orjson.dumps(batch))
    assert r.status_code == 202 and r.json()["accepted"] == 50
    assert all(p["partition"].startswith(topic + "/") for p in r.json()["positions"])
    messages = read_topic(kafka_brokers, topic)
    assert len(messages) == 51
    for key, value in messages:
        assert orjson.loads(value)["user_id"].encode() == key


def test_invalid_events_are_refused_with_reasons_and_nothing_is_produced(client, kafka_brokers, topic):
    bad = [EVENT, {**EVENT, "type": "PAUSE"}, {**EVENT, "version": -1}, {"user_id": "x"}]
    r = client.post("/events", content=orjson.dumps(bad))
    assert r.status_code == 400
    assert [(p["index"], p["reason"]) for p in r.json()["invalid"]] == [
        (1, "unknown_type"), (2, "out_of_range"), (3, "missing_field")]
    r = client.post("/events", content=b"{nope")
    assert r.status_code == 400 and r.json()["invalid"][0]["reason"] == "invalid_json"
    assert client.post("/events", content=b"[]").status_code == 400
    assert read_topic(kafka_brokers, topic) == []


def test_unreachable_broker_is_a_503():
    app = create_app(Settings(kafka=KafkaEndpoint(f"127.0.0.1:{free_port()}", "t"), delivery_timeout_ms=1000))
    with TestClient(app, headers=JSON) as c:
        r = c.post("/events", content=orjson.dumps(EVENT))
    assert r.status_code == 503 and "did not acknowledge" in r.json()["error"]


def test_served_ingest_feeds_the_flow(tmp_path, kafka_brokers, topic, redis_url, namespace):
    ensure_topic(kafka_brokers, topic, 2)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "rankflow.cli", "serve", "--port", str(port),
                               "--kafka", f"{kafka_brokers}/{topic}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}/events"
        deadline = time.monotonic() + 30
        while True:
            try:
                r = post_json(url, content=orjson.dumps([
                    EVENT, {**EVENT, "user_id": "u2", "playback_id": "p2"},
                    {**EVENT, "user_id": "u3", "playback_id": "p3", "song_id": "song_b"}]))
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.1)
        assert r.status_code == 202
    finally:
        server.terminate()
        server.wait(timeout=30)
    run = subprocess.run([sys.executable, "-m", "rankflow.cli", "run", "--input", f"kafka:{kafka_brokers}/{topic}",
                          "--until-eof", "--redis", redis_url, "--namespace", namespace,
                          "--dead-letter", f"jsonl:{tmp_path / 'dl.jsonl'}"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    top = subprocess.run([sys.executable, "-m", "rankflow.cli", "top", "--json", "--redis", redis_url,
                          "--namespace", namespace], capture_output=True, text=True)
    assert ranking(orjson.loads(top.stdout)) == [("song_a", 2), ("song_b", 1)]


@contextmanager
def served(*options: str, log: Path, token_env: str | None = None, key_env: str | None = None) -> Iterator[str]:
    """``rankflow serve`` in its own process: the real command line, uvicorn and event
    loop; ``$RANKFLOW_INGEST_TOKEN`` is ``token_env`` and ``$RANKFLOW_SIGNING_KEY``
    ``key_env``, whatever the test's environment."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("RANKFLOW_INGEST_TOKEN", "RANKFLOW_SIGNING_KEY")}
    if token_env is not None:
        env["RANKFLOW_INGEST_TOKEN"] = token_env
    if key_env is not None:
        env["RANKFLOW_SIGNING_KEY"] = key_env
    with log.open("wb") as err:
        server = subprocess.Popen([sys.executable, "-m", "rankflow.cli", "serve", "--port", str(port), *options],
                                  stdout=subprocess.DEVNULL, stderr=err, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{url}/openapi.json")
                break
            except httpx.ConnectError:
                assert server.poll() is None and time.monotonic() < deadline, \
                    f"the server did not start: {log.read_text()}"
                time.sleep(0.1)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


@contextmanager
def served_in_thread(app: FastAPI) -> Iterator[str]:
    """uvicorn with its own event loop on a thread: a handler that blocked that loop
    would keep every other request of the test waiting."""
    with in_thread(lambda port: uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")) as port:
        yield f"http://127.0.0.1:{port}"


def status_of_unfinished_request(port: int, request: bytes) -> int:
    """Send ``request`` (a head and the start of a body) and never the rest: the status
    of the answer, which only comes if the server decides before the body ends."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        received = b""
        try:
            while b"\r\n" not in received:
                chunk = sock.recv(4096)
                assert chunk, f"the server closed the connection without an answer: {received!r}"
                received += chunk
        except TimeoutError:
            pytest.fail("no answer in 10 s to a request whose body never ended: the server waits for the whole body")
    return int(received.split(b" ", 2)[1])


def test_the_body_limit_is_enforced_while_reading(tmp_path, kafka_brokers, topic, redis_url):
    ensure_topic(kafka_brokers, topic, 2)
    log = tmp_path / "serve.log"
    with served("--kafka", f"{kafka_brokers}/{topic}", "--redis", redis_url, "--max-body-bytes", "1000",
                log=log) as url:
        port = int(url.rsplit(":", 1)[1])
        head = b"POST /events HTTP/1.1\r\nHost: rankflow\r\nContent-Type: application/json\r\n"
        assert status_of_unfinished_request(port, head + b"Content-Length: 1001\r\n\r\n") == 413, \
            "a declared length over the limit is refused before any of the body is read"
        chunks = b"258\r\n" + b" " * 600 + b"\r\n"  # 0x258 = 600 bytes, twice, and no last chunk
        assert status_of_unfinished_request(port, head + b"Transfer-Encoding: chunked\r\n\r\n" + chunks * 2) == 413, \
            "a chunked body is refused as soon as it passes the limit"
        for too_long in (b" " * 1001, iter([b" " * 600, b" " * 600])):  # Content-Length, then chunked
            r = post_json(f"{url}/events", content=too_long)
            assert r.status_code == 413 and "longer than 1000 bytes" in r.json()["error"], r.text
        r = post_json(f"{url}/events", content=orjson.dumps(EVENT).ljust(1000))
        assert r.status_code == 202, f"a body of exactly the limit is accepted: {r.text}"
    assert len(read_topic(kafka_brokers, topic)) == 1
    assert "ingest is open: anyone who can reach this port can write events" in log.read_text()


def test_sizes_are_checked_then_the_event_count_then_each_event(client, kafka_brokers, topic):
    events = [{**EVENT, "user_id": f"u{i}", "playback_id": f"p{i}"} for i in range(MAX_EVENTS_PER_REQUEST + 1)]
    events[0] = {**EVENT, "type": "PAUSE"}  # invalid, but the count is checked first
    body = orjson.dumps(events)
    assert len(body) < Settings().max_body_bytes
    r = client.post("/events", content=body)
    assert r.status_code == 400, r.text
    assert [p["reason"] for p in r.json()["invalid"]] == ["too_many"]
    smaller_limit = create_app(Settings(kafka=KafkaEndpoint(kafka_brokers, topic), max_body_bytes=len(body) - 1))
    with TestClient(smaller_limit, headers=JSON) as c:
        assert c.post("/events", content=body).status_code == 413
    assert read_topic(kafka_brokers, topic) == []


def producer_queue(metrics: str) -> float:
    samples = {s.name: s.value for f in text_string_to_metric_families(metrics) for s in f.samples}
    return samples["rankflow_api_producer_queue_messages"]


async def post_and_scrape_while_it_waits(url: str, body: bytes, queue: int) -> httpx.Response:
    """POST ``body``; meanwhile scrape ``/metrics`` until the producer's queue is seen
    full, which must happen while the POST still waits for room in it."""
    async with httpx.AsyncClient(base_url=url, headers=JSON) as client:
        post = asyncio.create_task(client.post("/events", content=body, timeout=30))
        deadline = time.monotonic() + 20
        while True:
            try:
                scraped = await client.get("/metrics", timeout=10)
            except httpx.TimeoutException:
                pytest.fail("GET /metrics got no answer in 10 s while a POST waited for room in the "
                            "producer's queue: the event loop is blocked")
            assert not post.done(), "GET /metrics was answered only after the POST"
            if producer_queue(scraped.text) >= queue:
                break
            assert time.monotonic() < deadline, "the POST never filled the producer's queue"
            await asyncio.sleep(0.01)
        try:
            return await post
        except httpx.TimeoutException:
            pytest.fail("the POST got no answer in 30 s: a queue that stays full should be a 503 "
                        "after the delivery timeout")


def test_a_full_producer_queue_is_a_503_and_other_requests_go_on(redis_url):
    # Room in the queue comes only as a message times out (the broker is unreachable), so
    # producing these events one by one would take about 30 delivery timeouts.
    queue = 1
    settings = Settings(redis_url=redis_url, kafka=KafkaEndpoint(f"127.0.0.1:{free_port()}", "t"),
                        delivery_timeout_ms=2000, producer_queue_messages=queue)
    events = [{**EVENT, "user_id": f"u{i}", "playback_id": f"p{i}"} for i in range(30)]
    with served_in_thread(create_app(settings)) as url:
        r = asyncio.run(post_and_scrape_while_it_waits(url, orjson.dumps(events), queue))
    assert r.status_code == 503 and "queue stayed full" in r.json()["error"], r.text
    assert r.headers["Retry-After"] == "1"


def test_the_ingest_token_guards_post_events_only(kafka_brokers, topic, redis_url):
    ensure_topic(kafka_brokers, topic, 2)
    app = create_app(Settings(redis_url=redis_url, kafka=KafkaEndpoint(kafka_brokers, topic), ingest_token="s3cret"))
    body = orjson.dumps(EVENT)
    with TestClient(app, headers=JSON) as c:
        r = c.post("/events", content=body)
        assert r.status_code == 401 and "Authorization: Bearer" in r.json()["error"]
        assert r.headers["WWW-Authenticate"] == "Bearer"
        for wrong in ("Bearer s3cre", "Bearer s3cret2", "Basic s3cret"):
            r = c.post("/events", content=body, headers={"Authorization": wrong})
            assert r.status_code == 401 and r.headers["WWW-Authenticate"].startswith("Bearer"), wrong
        assert c.post("/events", content=body, headers={"Authorization": "Bearer s3cret"}).status_code == 202
        assert c.get("/rankings").status_code != 401 and c.get("/openapi.json").status_code == 200
    assert len(read_topic(kafka_brokers, topic)) == 1


def test_the_ingest_token_from_the_environment(tmp_path, kafka_brokers, topic, redis_url):
    ensure_topic(kafka_brokers, topic, 2)
    log = tmp_path / "serve.log"
    with served("--kafka", f"{kafka_brokers}/{topic}", "--redis", redis_url, log=log, token_env="from-env") as url:
        assert post_json(f"{url}/events", content=orjson.dumps(EVENT)).status_code == 401
        r = post_json(f"{url}/events", content=orjson.dumps(EVENT), headers={"Authorization": "Bearer from-env"})
        assert r.status_code == 202, r.text
    assert "ingest is open" not in log.read_text()
    assert ingest_token("option", {"RANKFLOW_INGEST_TOKEN": "from-env"}) == "option", "the option wins"
    assert ingest_token(None, {}) is None
    with pytest.raises(UsageError, match="empty"):
        ingest_token(None, {"RANKFLOW_INGEST_TOKEN": ""})


def test_openapi_lists_every_answer_of_post_events():
    with TestClient(create_app(Settings()), headers=JSON) as c:
        responses = c.get("/openapi.json").json()["paths"]["/events"]["post"]["responses"]
    assert {"202", "400", "401", "413", "503"} <= set(responses)


# -- POST /matches/{match_id}/result: match results to the score topic ---------------------------

def match_result(player: str, points: int, played_at: int, *, game: str = "g1", match: str = "m9",
                 signed_points: int | None = None) -> dict:
    """A result as a match server posts it: no match_id (the path has it), no received_at."""
    sig = signature(example.KEY, game, match, player, points if signed_points is None else signed_points, played_at)
    return {"game_id": game, "player_id": player, "points": points, "played_at": played_at, "sig": sig}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.fixture
def scores(kafka_brokers, topic):
    ensure_topic(kafka_brokers, topic, 2)
    app = create_app(Settings(score_kafka=KafkaEndpoint(kafka_brokers, topic), signing_key=example.KEY))
    with TestClient(app, headers=JSON) as c:
        yield c


def test_match_results_are_stamped_and_in_kafka_keyed_by_player(scores, kafka_brokers, topic):
    played = now_ms() - 60_000
    results = [match_result("ana", 50, played), {**match_result("bo", 0, played), "match_id": "m9", "extra": [1]}]
    before = now_ms()
    r = scores.post("/matches/m9/result", content=orjson.dumps(results))
    after = now_ms()
    assert r.status_code == 202, r.text
    assert r.json()["accepted"] == 2 and all(p["partition"].startswith(topic + "/") for p in r.json()["positions"])
    r = scores.post("/matches/m10/result", content=orjson.dumps(match_result("cy", 7, played, match="m10")))
    assert r.status_code == 202, r.text
    records = dict(read_topic(kafka_brokers, topic))
    messages = {key: orjson.loads(value) for key, value in records.items()}
    assert set(messages) == {b"ana", b"bo", b"cy"}
    ana, bo = messages[b"ana"], messages[b"bo"]
    assert ana == {**results[0], "match_id": "m9", "received_at": ana["received_at"]}
    assert before <= ana["received_at"] <= after and bo["received_at"] == ana["received_at"]
    assert bo["extra"] == [1] and bo["match_id"] == "m9"
    assert messages[b"cy"]["match_id"] == "m10"
    for key, value in records.items():  # each passes the flow's own checks 1 to 6, as produced
        assert check_score(value, example.KEY)[2].encode() == key


def test_an_invalid_result_is_a_400_naming_the_first_and_nothing_is_produced(scores, kafka_brokers, topic):
    played = now_ms() - 60_000
    good = match_result("ana", 50, played)
    cases = [
        ([good, match_result("eve", 900, played, signed_points=90)], 1, "bad_signature"),
        ([good, {k: v for k, v in match_result("bo", 5, played).items() if k != "sig"}], 1, "bad_signature"),
        ([good, {**match_result("bo", 5, played), "match_id": "m8"}], 1, "match_id_mismatch"),
        ([{k: v for k, v in good.items() if k != "points"}, {**good, "points": "5"}], 0, "missing_field"),
        ([good, good, {**good, "points": 5.0}], 2, "wrong_type"),
        ([{**good, "points": 10001}], 0, "out_of_range"),
        ([good, match_result("bo", 5, now_ms() + 3_600_000)], 1, "in_future"),
        ([good, [good]], 1, "not_an_object"),
    ]
    for body, index, reason in cases:
        r = scores.post("/matches/m9/result", content=orjson.dumps(body))
        assert r.status_code == 400, (reason, r.text)
        assert (r.json()["index"], r.json()["reason"]) == (index, reason), r.text
        assert r.json()["detail"] and "nothing was produced" in r.json()["error"]
    huge = b'{"game_id": "g1", "player_id": "ana", "points": 18446744073709551616, "played_at": 5, "sig": "x"}'
    r = scores.post("/matches/m9/result", content=huge)
    assert (r.status_code, r.json()["reason"]) == (400, "out_of_range"), "an integer beyond 64 bits is one, too big"
    long_match = "m" * 65
    r = scores.post(f"/matches/{long_match}/result", content=orjson.dumps(match_result("ana", 1, played, match=long_match)))
    assert (r.status_code, r.json()["reason"]) == (400, "out_of_range") and "match_id" in r.json()["detail"]
    for body, reason in [(b"{nope", "invalid_json"), (b'{"points": NaN}', "invalid_json"), (b"[]", "empty"),
                         (orjson.dumps([good] * (MAX_RESULTS_PER_REQUEST + 1)), "too_many")]:
        r = scores.post("/matches/m9/result", content=body)
        assert (r.status_code, r.json()["index"], r.json()["reason"]) == (400, None, reason), r.text
    assert read_topic(kafka_brokers, topic) == []


def test_without_a_signing_key_sig_is_not_checked(kafka_brokers, topic):
    ensure_topic(kafka_brokers, topic, 1)
    with TestClient(create_app(Settings(score_kafka=KafkaEndpoint(kafka_brokers, topic))), headers=JSON) as c:
        unsigned = {k: v for k, v in match_result("ana", 5, now_ms()).items() if k != "sig"}
        assert c.post("/matches/m1/result", content=orjson.dumps(unsigned)).status_code == 202
        assert c.post("/matches/m1/result", content=orjson.dumps({**unsigned, "sig": 7})).status_code == 202
    assert len(read_topic(kafka_brokers, topic)) == 2


def test_match_results_need_the_token_the_size_limit_and_a_score_topic(kafka_brokers, topic, redis_url):
    ensure_topic(kafka_brokers, topic, 1)
    body = orjson.dumps(match_result("ana", 5, now_ms()))
    settings = Settings(redis_url=redis_url, score_kafka=KafkaEndpoint(kafka_brokers, topic), ingest_token="s3cret",
                        max_body_bytes=len(body), signing_key=example.KEY)
    with TestClient(create_app(settings), headers=JSON) as c:
        r = c.post("/matches/m9/result", content=body)
        assert r.status_code == 401 and r.headers["WWW-Authenticate"] == "Bearer"
        r = c.post("/matches/m9/result", content=body, headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401
        auth = {"Authorization": "Bearer s3cret"}
        r = c.post("/matches/m9/result", content=body + b" ", headers=auth)
        assert r.status_code == 413 and f"longer than {len(body)} bytes" in r.json()["error"]
        assert c.post("/matches/m9/result", content=body, headers=auth).status_code == 202
        r = c.post("/events", content=orjson.dumps(EVENT), headers=auth)
        assert r.status_code == 503 and "--kafka" in r.json()["error"], "POST /events has no topic here"
    assert len(read_topic(kafka_brokers, topic)) == 1
    with TestClient(create_app(Settings(redis_url=redis_url)), headers=JSON) as c:
        r = c.post("/matches/m9/result", content=body)
        assert r.status_code == 503 and "--score-kafka" in r.json()["error"]


def test_unreachable_score_broker_is_a_503():
    app = create_app(Settings(score_kafka=KafkaEndpoint(f"127.0.0.1:{free_port()}", "t"), delivery_timeout_ms=1000))
    with TestClient(app, headers=JSON) as c:
        r = c.post("/matches/m1/result", content=orjson.dumps(match_result("ana", 5, now_ms())))
    assert r.status_code == 503 and "did not acknowledge" in r.json()["error"] and r.headers["Retry-After"] == "1"


def test_served_match_results_reach_the_boards(tmp_path, kafka_brokers, topic, redis_url, namespace):
    """``rankflow serve --score-kafka --signing-key``, the real command line; then the boards
    flow reads the topic: the accepted results are on the board, the forged one nowhere."""
    ensure_topic(kafka_brokers, topic, 2)
    played = now_ms() - 60_000
    with served("--score-kafka", f"{kafka_brokers}/{topic}", "--redis", redis_url, "--signing-key",
                example.KEY.hex(), log=tmp_path / "serve.log") as url:
        r = post_json(f"{url}/matches/m1/result", content=orjson.dumps(
            [match_result("ana", 50, played, match="m1"), match_result("bo", 30, played, match="m1")]))
        assert r.status_code == 202, r.text
        r = post_json(f"{url}/matches/m2/result", content=orjson.dumps(match_result("bo", 900, played, match="m2",
                                                                                   signed_points=90)))
        assert (r.status_code, r.json()["reason"]) == (400, "bad_signature")
    with served("--score-kafka", f"{kafka_brokers}/{topic}", "--redis", redis_url, log=tmp_path / "serve2.log",
                key_env=example.KEY.hex()) as url:
        r = post_json(f"{url}/matches/m2/result", content=orjson.dumps(match_result("bo", 900, played, match="m2",
                                                                                   signed_points=90)))
        assert (r.status_code, r.json()["reason"]) == (400, "bad_signature"), "the key from the environment"
        r = post_json(f"{url}/matches/m3/result", content=orjson.dumps(match_result("cy", 40, played, match="m3")))
        assert r.status_code == 202, r.text
    final = run(RunOptions(input=f"kafka:{kafka_brokers}/{topic}", until_eof=True, redis_url=redis_url,
                           namespace=namespace, dead_letter=f"jsonl:{tmp_path / 'dead.jsonl'}", flow="boards",
                           signing_key=example.KEY))
    assert final is not None and final["dead_letters"] == 0
    client = redis.Redis.from_url(redis_url)
    try:
        top = BoardReader(client, namespace).top("g1", "all", 10)
    finally:
        client.close()
    assert [(i["player_id"], i["score"]) for i in top["items"]] == [("ana", 50), ("cy", 40), ("bo", 30)]


def test_serve_help_documents_the_score_options():
    out = subprocess.run([sys.executable, "-m", "rankflow.cli", "serve", "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    for option in ("--score-kafka kafka:HOST:PORT/TOPIC", "--signing-key HEX", "RANKFLOW_SIGNING_KEY", "--ingest-token"):
        assert option in " ".join(out.stdout.split()), option


def test_openapi_lists_every_answer_of_post_match_result():
    with TestClient(create_app(Settings()), headers=JSON) as c:
        responses = c.get("/openapi.json").json()["paths"]["/matches/{match_id}/result"]["post"]["responses"]
    assert {"202", "400", "401", "413", "503"} <= set(responses)
