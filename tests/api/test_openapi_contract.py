"""The OpenAPI contract (``/openapi.json``) held against a real service, and ``/docs`` offline.

``rankflow serve``'s server (``api.server.server_config``, in a thread) answers over a real
Redis holding what the three real flows published from small logs, with a real broker
behind both ingest routes, an ingest token and a signing key. schemathesis runs every check
(``--checks all``: status codes, content types, headers, response schemas, negative data
refused, valid data accepted, auth not ignored, methods...) over every operation, in every
phase (examples, coverage, fuzzing, stateful), with a fixed seed and a bounded number of
examples: 0 failures, 0 errors. The ids of the schema's examples (``arena``, ``p000042``,
``acme``...) are in the published data, so the examples reach real answers.

What the run leaves out, and why:

* The event streams (``.../stream``) never end: schemathesis would wait for a whole body.
  :func:`test_streams_are_event_streams` checks them against the schema instead: their
  content type, their first event, and their errors.
* What a static schema cannot say is kept out of the requests the schema calls valid
  (``tests/api/openapi_hooks.py``): a ``k`` beyond the snapshot's K_max (a documented
  ``400``), an integer written ``10.0``, a match result played in the future or naming
  another match, and a result's signature (computed as a match server does).
* The service's staleness bound is raised (``stale_after_ms``) so that the finished runs'
  snapshots keep ``/health`` at ``200`` while the run lasts: its ``503`` is documented, but
  schemathesis counts every 5xx as a failure.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import jsonschema_rs
import pytest
from fastapi.testclient import TestClient

from rankflow.api import docs
from rankflow.api.app import Settings, create_app
from rankflow.connectors.kafka import KafkaEndpoint, ensure_topic
from rankflow.options import RunOptions
from rankflow.runner import run
from rankflow.services import free_port
from tests import boards_example as example
from tests.activity.test_activity_flow import line
from tests.api.raw_http import served
from tests.events import ev
from tests.kafka_helpers import read_topic

ROOT = Path(__file__).resolve().parents[2]
K_MAX = 20
TOKEN = "contract-token"
KEY = example.KEY
MAX_EXAMPLES = 50
T0 = 1_800_000_000_000
READ_POSTS = ["/boards/{game}/{board}/ranks"]
"""The reads whose question is a body (no token, no Kafka): the rest of the POSTs are ingest."""
STREAMS = ["/rankings/stream", "/boards/{game}/{board}/stream", "/activity/stream", "/activity/{workspace}/stream"]


def publish(redis_url: str, tmp: Path, namespace: str) -> None:
    """The three flows, each to the end of a small log, into ``namespace``: the schema's example
    ids (``song_17``, ``arena``, ``p000042``, ``acme``, ``general``) are in their answers."""
    def flow(name: str, lines: list[bytes], **options: Any) -> None:
        path = tmp / f"{name}.jsonl"
        path.write_bytes(b"".join(x + b"\n" for x in lines))
        final = run(RunOptions(input=f"jsonl:{path}", until_eof=True, redis_url=redis_url, namespace=namespace,
                               dead_letter=f"jsonl:{tmp / f'dead-{name}.jsonl'}", flow=name, **options))
        assert final is not None, name

    flow("listeners", [ev(f"u{i}", f"p{i}", "song_17" if i % 3 else f"song_{i}", "START", 1, ts=T0 + i)
                       for i in range(12)], k_max=K_MAX, recent_minutes=5)
    day = example.ms("2027-01-04 10:00:00.000")
    flow("boards", [example.result(f"p0000{40 + i}", f"m{i}", 10 * i, day + i, day + i + 1000, game="arena")
                    for i in range(6)], signing_key=KEY)
    flow("activity", [line("acme", "general" if i % 2 else f"c{i}", f"u{i}", T0 + 1000 * i) for i in range(10)]
         + [line("beta", "general", "u1", T0)], k_max=K_MAX)


class Service(NamedTuple):
    base: str  # http://127.0.0.1:PORT
    brokers: str
    events: str  # the topics of POST /events and POST /matches/{match_id}/result
    scores: str


@pytest.fixture(scope="module")
def service(redis_url: str, kafka_brokers: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """The service, once every product is ready."""
    tmp = tmp_path_factory.mktemp("contract")
    namespace = f"oa-{uuid.uuid4().hex[:10]}"
    publish(redis_url, tmp, namespace)
    events, scores = f"oa-events-{namespace}", f"oa-scores-{namespace}"
    ensure_topic(kafka_brokers, events, 1)
    ensure_topic(kafka_brokers, scores, 1)
    settings = Settings(redis_url=redis_url, namespace=namespace, kafka=KafkaEndpoint(kafka_brokers, events),
                        score_kafka=KafkaEndpoint(kafka_brokers, scores), signing_key=KEY, ingest_token=TOKEN,
                        poll_ms=100, stale_after_ms=3_600_000,
                        delivery_timeout_ms=30_000)  # a loaded machine's broker acknowledges late, never a 503
    with served(create_app(settings)) as port:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while (ready := httpx.get(f"{base}/readyz")).status_code != 200:
            assert time.monotonic() < deadline, ready.text
            time.sleep(0.05)
        yield Service(base, kafka_brokers, events, scores)


def schemathesis(base: str, tmp: Path) -> dict[str, Any]:
    """``st run`` with every check over every operation but the streams: its JSON report."""
    config = tmp / "schemathesis.toml"
    # a 413 (a body over --max-body-bytes, such as more than 10,000 events) refuses negative data too
    config.write_text('hooks = "tests.api.openapi_hooks"\n'
                      "[checks.negative_data_rejection]\n"
                      'expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422",'
                      ' "428", "429", "5xx"]\n')
    report = tmp / "report.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RANKFLOW_CONTRACT_K_MAX": str(K_MAX),
           "RANKFLOW_CONTRACT_SIGNING_KEY": KEY.hex()}
    command = [str(Path(sys.executable).parent / "st"), "--config-file", str(config), "run",
               f"{base}/openapi.json", "--checks", "all", "--seed", "1", "--generation-deterministic",
               "--max-examples", str(MAX_EXAMPLES), "--workers", "1",
               "--exclude-path-regex", "/stream$", "--request-timeout", "60", "--no-color",
               "-H", f"Authorization: Bearer {TOKEN}", "--report", "json", "--report-json-path", str(report)]
    # in tmp: schemathesis keeps a cache of the crashes it found (.schemathesis/) where it runs
    done = subprocess.run(command, cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
    assert report.exists(), done.stdout[-5000:] + done.stderr[-5000:]
    got: dict[str, Any] = json.loads(report.read_text())
    got["output"] = done.stdout
    return got


def test_schemathesis_finds_nothing_against_a_real_service(service, tmp_path):
    report = schemathesis(service.base, tmp_path)
    output = report["output"]
    assert report["failures"] == [] and report["errors"] == [], output[-20000:]
    assert report["exit_code"] == 0 and report["complete"], output[-20000:]
    operations = report["operations"]
    assert operations["tested"] == operations["selected"] == operations["total"] - len(STREAMS), operations
    assert {phase: p["status"] for phase, p in report["phases"].items()} == {
        "examples": "success", "coverage": "success", "fuzzing": "success", "stateful": "success"}, output[-5000:]
    cases = report["test_cases"]
    assert cases["generated"] >= 500 and cases["with_failures"] == 0 and cases["errored"] == 0, cases
    print(f"schemathesis: {cases['generated']} test cases over {operations['tested']} operations, "
          f"{len(report['failures'])} failures")
    # the 202s were reached: what the broker acknowledged is on the topics
    assert read_topic(service.brokers, service.events) and read_topic(service.brokers, service.scores)


def test_streams_are_event_streams(service):
    """Each stream answers ``text/event-stream`` and sends its first event at once; its refusals are
    the documented JSON errors."""
    base = service.base
    schema = httpx.get(f"{base}/openapi.json").json()
    for path, event in [("/rankings/stream?k=3", b"event: ranking"), ("/boards/arena/all/stream", b"event: board"),
                        ("/activity/acme/stream", b"event: activity"),
                        ("/activity/stream?workspace=acme", b"event: activity")]:
        with httpx.stream("GET", f"{base}{path}", timeout=30) as answer:
            assert answer.status_code == 200, path
            assert answer.headers["content-type"].split(";")[0] == "text/event-stream", path
            first = b""
            for chunk in answer.iter_bytes():
                first += chunk
                if b"\n\n" in first:
                    break
            assert first.startswith(event) and b"\ndata: {" in first, (path, first)
    for path, status, template in [("/rankings/stream?k=0", 400, "/rankings/stream"),
                                   ("/rankings/stream?k=ten", 400, "/rankings/stream"),
                                   ("/boards/arena/monthly/stream", 400, "/boards/{game}/{board}/stream"),
                                   ("/boards/nobody/all/stream", 404, "/boards/{game}/{board}/stream"),
                                   ("/activity/stream?workspace=", 400, "/activity/stream")]:
        answer = httpx.get(f"{base}{path}")
        assert answer.status_code == status and set(answer.json()) == {"error"}, (path, answer.text)
        assert answer.headers["content-type"] == "application/json"
        documented = schema["paths"][template]["get"]["responses"]
        assert documented[str(status)]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}
        assert list(documented["200"]["content"]) == ["text/event-stream"], template


# -- the schema itself, read without a service (no Redis: the app is never started) ----------

@pytest.fixture(scope="module")
def offline() -> Iterator[TestClient]:
    yield TestClient(create_app(Settings(redis_url="redis://127.0.0.1:1/0")))  # no lifespan: nothing is read


def test_every_answer_is_described(offline):
    """Every operation: a schema for every status it documents (none left empty), ``422`` nowhere,
    ``/metrics`` as text, the streams as event streams, the request bodies with examples, and
    every parameter with its bounds or pattern."""
    schema = offline.get("/openapi.json").json()
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            where = f"{method.upper()} {path}"
            responses = operation["responses"]
            assert "422" not in responses, where
            assert {"200", "202"} & set(responses), where
            for status, response in responses.items():
                if status == "304":  # Not Modified has no body (api.openapi_cache)
                    assert "content" not in response and response["headers"], where
                    continue
                content = response["content"]
                assert len(content) == 1 and all(body["schema"] for body in content.values()), (where, status)
                if status.startswith("2"):
                    media = next(iter(content))
                    expected = ("text/event-stream" if path in STREAMS else "text/plain" if path == "/metrics"
                                else "application/json")
                    assert media == expected, where
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "header":  # If-None-Match: any value is valid (api.openapi_cache)
                    continue
                keywords = set(parameter["schema"])
                assert keywords & {"minimum", "minLength", "pattern"}, (where, parameter["name"])
            if method == "post":
                body = operation["requestBody"]
                assert body["required"] and body["content"]["application/json"]["examples"], where
                refusals = {"200", "400", "404", "409", "413", "503"} if path in READ_POSTS else {
                    "202", "400", "401", "413", "415", "503"}
                assert set(responses) == refusals, where
    health = schema["paths"]["/health"]["get"]["responses"]
    assert set(health) == {"200", "503"}
    board = schema["paths"]["/boards/{game}/{board}/top"]["get"]["parameters"]
    assert {p["name"]: p["schema"].get("pattern") for p in board}["board"] == (
        "^(all|best|daily|weekly|(final:)?(daily:[0-9]{4}-[0-9]{2}-[0-9]{2}|weekly:[0-9]{4}-W[0-9]{2}"
        "|season:[A-Za-z0-9_.-]{1,32}))(@[A-Za-z_][A-Za-z0-9_]{0,31}=[A-Za-z0-9_.-]{1,32})?$")
    ranks = schema["paths"]["/boards/{game}/{board}/ranks"]["post"]
    assert "since" in {p["name"] for p in ranks["parameters"]}  # rank change since a basis (5.6)
    assert "rank_change" in schema["components"]["schemas"]["SetEntry"]["properties"]
    assert "since_snapshot_id" in schema["components"]["schemas"]["Ranks"]["properties"]
    assert "groups" in schema["components"]["schemas"]["GameBoards"]["properties"]


def conforms(schema: dict[str, Any], template: str, method: str, answer: httpx.Response) -> None:
    """``answer`` is one its operation documents: status, content type and body."""
    where = f"{method.upper()} {template} {answer.status_code}: {answer.text[:300]}"
    documented = schema["paths"][template][method]["responses"].get(str(answer.status_code))
    assert documented is not None, where
    media = answer.headers["content-type"].split(";")[0]
    assert list(documented["content"]) == [media], where
    root = {"components": schema["components"], **documented["content"][media]["schema"]}
    errors = [str(e) for e in jsonschema_rs.validator_for(root).iter_errors(answer.json())]
    assert not errors, (where, errors)


def test_refusals_and_a_service_without_redis_are_as_documented():
    """What the schemathesis run cannot reach against a healthy service: Redis unreachable (every
    reading route's ``503``, ``/health`` and ``/readyz`` degraded), ingest without a broker
    (``503``), Starlette's own ``404`` and ``405``: each answer as its operation documents it."""
    with TestClient(create_app(Settings(redis_url=f"redis://127.0.0.1:{free_port()}/0"))) as client:
        schema = client.get("/openapi.json").json()
        for url, template in [("/health", "/health"), ("/readyz", "/readyz"), ("/rankings?k=3", "/rankings"),
                              ("/rankings/recent", "/rankings/recent"), ("/songs/song_17", "/songs/{song_id}"),
                              ("/boards", "/boards"), ("/boards/arena/all/top?n=3", "/boards/{game}/{board}/top"),
                              ("/boards/arena/daily/players/p000042", "/boards/{game}/{board}/players/{player_id}"),
                              ("/boards/arena/all/players/p000042/around",
                               "/boards/{game}/{board}/players/{player_id}/around"),
                              ("/boards/arena/all/stream", "/boards/{game}/{board}/stream"),
                              ("/activity", "/activity"), ("/activity/global/top", "/activity/global/top"),
                              ("/activity/acme/top", "/activity/{workspace}/top"),
                              ("/activity/top?workspace=acme", "/activity/top"),
                              ("/activity/acme/channels/general", "/activity/{workspace}/channels/{channel}"),
                              ("/activity/channel?workspace=acme&channel=general", "/activity/channel"),
                              ("/activity/acme/stream", "/activity/{workspace}/stream")]:
            answer = client.get(url)
            assert answer.status_code == 503, (url, answer.text)
            conforms(schema, template, "get", answer)
        for url, template in [("/rankings?k=0", "/rankings"), ("/boards/arena/all/top?n=1001", "/boards/{game}/{board}/top"),
                              ("/boards/arena/monthly/players/p1", "/boards/{game}/{board}/players/{player_id}"),
                              ("/boards/arena/all/players/p1/around?r=-1",
                               "/boards/{game}/{board}/players/{player_id}/around"),
                              ("/activity/global/top?k=ten", "/activity/global/top"),
                              ("/activity/channel?workspace=acme", "/activity/channel")]:
            answer = client.get(url)
            assert answer.status_code == 400, (url, answer.text)
            conforms(schema, template, "get", answer)
        event = b'{"user_id": "u1", "playback_id": "p1", "song_id": "s1", "type": "START", "version": 1, "ts": 0}'
        for url, template in [("/events", "/events"), ("/matches/m1/result", "/matches/{match_id}/result")]:
            answer = client.post(url, content=event, headers={"content-type": "application/json"})
            assert answer.status_code == 503 and "not configured" in answer.json()["error"], answer.text
            conforms(schema, template, "post", answer)
        ranks = "/boards/{game}/{board}/ranks"
        for body, status in [({"players": ["p000042"]}, 503), ({"players": "p000042"}, 400)]:
            answer = client.post("/boards/arena/all/ranks", json=body)
            assert answer.status_code == status, answer.text
            conforms(schema, ranks, "post", answer)
        assert client.get("/nowhere").json() == {"error": "Not Found"}
        refused = client.delete("/rankings")
        assert refused.status_code == 405 and refused.json() == {"error": "Method Not Allowed"}
        assert refused.headers["allow"] == "GET"


def test_the_request_examples_are_what_ingest_accepts(offline):
    """The documented examples pass the flows' own checks (a match result's but for its signature,
    which is made with a key of the reader's)."""
    from rankflow.api.ingest import check_events
    from rankflow.api.match_results import check_results

    schema = offline.get("/openapi.json").json()
    events = schema["paths"]["/events"]["post"]["requestBody"]["content"]["application/json"]["examples"]
    for example_ in events.values():
        records, problems = check_events(json.dumps(example_["value"]).encode())
        assert records and not problems, example_
    results = schema["paths"]["/matches/{match_id}/result"]["post"]["requestBody"]["content"]["application/json"]
    for example_ in results["examples"].values():
        records, refusal = check_results(json.dumps(example_["value"]).encode(), "m-20270101-0001", None,
                                         2_000_000_000_000)
        assert records and refusal is None, (example_, refusal)


# -- /docs and /redoc, offline -----------------------------------------------------------------

ASSET = re.compile(r'(?:src|href)="([^"]+)"')


def test_docs_and_redoc_load_their_assets_from_the_service(offline):
    """The pages name only the service's own files (no other host: they work offline), and the
    service serves each one with its content type."""
    types = {".js": "text/javascript", ".css": "text/css", ".png": "image/png"}
    for page in ("/docs", "/redoc"):
        html = offline.get(page)
        assert html.status_code == 200 and html.headers["content-type"].startswith("text/html"), page
        assert not re.search(r"https?://", html.text), f"{page} names another host"
        assets = ASSET.findall(html.text)
        assert assets and all(a.startswith(docs.ASSETS + "/") for a in assets), assets
        for asset in assets:
            got = offline.get(asset)
            assert got.status_code == 200 and len(got.content) > 1000, asset
            assert got.headers["content-type"].split(";")[0] == types[Path(asset).suffix], asset
            assert got.content == (docs.FOLDER / Path(asset).name).read_bytes(), asset
        assert "/openapi.json" in html.text
        assert html.headers["content-security-policy"] == docs.POLICY  # the browser asks no other host
    assert "validatorUrl" in offline.get("/docs").text  # the online validator badge, off
