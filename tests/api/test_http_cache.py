"""Cacheable reads (``api.http_cache``): every snapshot-backed ``GET`` of the three products answers
with a weak ``ETag`` naming its snapshot and target, ``Cache-Control`` (``--cache-max-age``) and
``Last-Modified``, through the protocol's prepared answers (a keep-alive ``GET``) and the ASGI
path (a ``Connection: close`` one) alike; ``If-None-Match`` with the current tag is a ``304``
without a body and without asking Redis; errors are ``no-store``. Against real flows' snapshots
in a real Redis, served by ``rankflow serve``'s server."""

from __future__ import annotations

import doctest
import re
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from email.utils import formatdate
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis

from rankflow.api.app import Settings, create_app
from rankflow.api import http_cache
from rankflow.api.http_cache import matches
from rankflow.options import RunOptions
from rankflow.runner import run
from tests import boards_example as example
from tests.activity.test_activity_flow import line, run_activity
from rankflow.connectors.redis_keys import activity_namespace, boards_namespace
from tests.api.raw_http import Connection, Response, served
from tests.cli.test_cli_mistakes import cli, one_line
from tests.conftest import FlowRunner
from tests.events import ev
from tests.snapshot_stamp import stored_published_at
from tests.waiting import wait_for

LINES = [ev("u1", "p1", "song_a", "START", 1), ev("u2", "p2", "song_b", "START", 1),
         ev("u3", "p3", "song_b", "START", 1)]
MORE = LINES + [ev("u9", "p9", "song_z", "START", 1)]
T0 = 1_800_000_000_000
ACTIVITY = [line("A", "x", "u1", T0), line("A", "x", "u2", T0 + 1), line("A", "y", "u1", T0 + 2),
            line("B", "z", "u3", T0 + 3)]
VALIDATORS = ("etag", "cache-control", "last-modified")
ETAG = re.compile(r'W/"(\d+)-(\d+)-[0-9a-f]{12}(-stale)?"')


def closing(port: int, path: str, *headers: str) -> Response:
    """``GET path`` with ``Connection: close``: never a prepared answer, always the ASGI path."""
    conn = Connection(port)
    try:
        return conn.request(path, "Connection: close", *headers)
    finally:
        conn.close()


def header(response: Response, name: str) -> str | None:
    return dict(response.headers).get(name)


def validators(response: Response) -> list[tuple[str, str]]:
    return [(k, v) for k, v in response.headers if k in VALIDATORS]


def check_validators(response: Response, max_age: str = "public, max-age=1") -> tuple[int, int]:
    """The answer's snapshot id and publish time, after checking its three headers against its body."""
    assert response.status == 200, (response.status, response.body)
    assert [k for k, _ in response.headers if k in VALIDATORS] == list(VALIDATORS), response.headers
    found = ETAG.fullmatch(header(response, "etag") or "")
    assert found, header(response, "etag")
    sid, at = int(found.group(1)), int(found.group(2))
    assert f'"snapshot_id":{sid},' in response.body.decode()
    assert header(response, "cache-control") == max_age
    assert header(response, "last-modified") == formatdate(at / 1000, usegmt=True)
    return sid, at


def same_on_both_paths(app: Any, port: int, conn: Connection, path: str) -> Response:
    """The keep-alive answer (prepared when the route has it ready) and the ASGI one carry the same
    validators; returns the keep-alive one."""
    kept = conn.request(path)
    check_validators(kept)
    asgi = closing(port, path)
    assert validators(asgi) == validators(kept), path
    return kept


def not_modified_on_both_paths(port: int, conn: Connection, path: str, tag: str, condition: str | None = None) -> None:
    """``If-None-Match: condition`` (``tag`` by default) is a ``304`` naming ``tag``, on both paths."""
    condition = condition or tag
    for got in (conn.request(path, f"If-None-Match: {condition}"),
                closing(port, path, f"If-None-Match: {condition}")):
        assert got.status == 304 and got.body == b"", (path, got.status, got.body)
        assert header(got, "etag") == tag and "content-length" not in dict(got.headers)
        assert header(got, "cache-control") and header(got, "last-modified")


def requests_counted(metrics: str, route: str, status: str) -> float:
    """``rankflow_api_requests_total`` of ``route`` and ``status`` in ``/metrics``' text (0: none)."""
    start = f'rankflow_api_requests_total{{route="{route}",status="{status}"}} '
    return sum(float(x[len(start):]) for x in metrics.splitlines() if x.startswith(start))


def no_store(response: Response, status: int) -> None:
    assert response.status == status, (response.status, response.body)
    assert header(response, "cache-control") == "no-store" and header(response, "etag") is None


# -- listeners ---------------------------------------------------------------------------------

def test_listener_reads_carry_validators_and_answer_304_until_a_new_snapshot(flow, redis_url, namespace):
    flow.run(flow.write_log(LINES, "a.jsonl"), namespace=namespace)
    app = create_app(Settings(redis_url=redis_url, namespace=namespace, poll_ms=20))
    with served(app) as port:
        conn = Connection(port)
        wait_for(lambda: conn.request("/rankings?k=2"), lambda r: r.status == 200)
        before = app.state.prepared.answered
        top = same_on_both_paths(app, port, conn, "/rankings?k=2")
        assert app.state.prepared.answered > before, "the keep-alive GET was a prepared answer"
        sid, _ = check_validators(top)
        for path in ("/rankings", "/rankings/recent?k=1", "/songs/song_b"):
            same_on_both_paths(app, port, conn, path)
        tags = {header(conn.request(p), "etag") for p in ("/rankings?k=1", "/rankings?k=2", "/songs/song_b")}
        assert len(tags) == 3, "the target is part of the tag"

        tag = header(top, "etag")
        assert tag is not None
        before = app.state.prepared.answered
        not_modified_on_both_paths(port, conn, "/rankings?k=2", tag)
        assert app.state.prepared.answered == before + 1, "the keep-alive 304 was the protocol's own"
        not_modified_on_both_paths(port, conn, "/rankings?k=2", tag, f'"nope", {tag}')
        not_modified_on_both_paths(port, conn, "/rankings?k=2", tag, "*")
        metrics = conn.request("/metrics").body.decode()
        assert requests_counted(metrics, "/rankings", "304") == 6, "the 304s before routing are the route's"
        assert 'route="other"' not in metrics, metrics
        assert conn.request("/rankings?k=2", 'If-None-Match: W/"1-2-000000000000"').status == 200
        assert conn.request("/rankings?k=3", f"If-None-Match: {tag}").status == 200, "another target"

        no_store(conn.request("/rankings?k=0"), 400)
        no_store(conn.request("/rankings?k=0", "If-None-Match: *"), 400)
        no_store(conn.request("/songs/nothing"), 404)
        assert header(conn.request("/health"), "etag") is None, "not a snapshot-backed read"
        assert header(conn.request("/metrics"), "cache-control") is None

        flow.run(flow.write_log(MORE, "b.jsonl"), namespace=namespace)  # a new snapshot
        newer = wait_for(lambda: conn.request("/rankings?k=2", f"If-None-Match: {tag}"), lambda r: r.status == 200)
        assert check_validators(newer)[0] > sid and header(newer, "etag") != tag
        assert closing(port, "/rankings?k=2", f"If-None-Match: {tag}").status == 200
        conn.close()


def test_a_snapshot_turning_stale_changes_the_tag(flow, redis_url, namespace):
    """A revalidating cache must not keep answering ``"stale": false`` once the service says
    ``true``: the tag of a stale answer differs (``-stale``); it keeps ``max-age``."""
    flow.run(flow.write_log(LINES), namespace=namespace)
    app = create_app(Settings(redis_url=redis_url, namespace=namespace, poll_ms=20, stale_after_ms=1000))
    with served(app) as port:
        conn = Connection(port)
        fresh = wait_for(lambda: conn.request("/rankings"), lambda r: r.status == 200)
        was_fresh = orjson.loads(fresh.body)["stale"] is False  # a loaded machine may be past the second already
        stale = wait_for(lambda: conn.request("/rankings"), lambda r: orjson.loads(r.body)["stale"] is True)
        tag = header(stale, "etag")
        assert tag is not None and tag.endswith('-stale"')
        check_validators(stale)
        not_modified_on_both_paths(port, conn, "/rankings", tag)
        if was_fresh:
            assert not header(fresh, "etag").endswith('-stale"')
            again = conn.request("/rankings", f"If-None-Match: {header(fresh, 'etag')}")
            assert again.status == 200 and header(again, "etag") == tag
        conn.close()


def test_the_max_age_option(flow, redis_url, namespace):
    flow.run(flow.write_log(LINES), namespace=namespace)
    for max_age, control in ((0, "no-cache"), (7, "public, max-age=7")):
        app = create_app(Settings(redis_url=redis_url, namespace=namespace, poll_ms=20, cache_max_age_s=max_age))
        with served(app) as port:
            conn = Connection(port)
            wait_for(lambda c=conn: c.request("/rankings"), lambda r: r.status == 200)
            check_validators(conn.request("/rankings"), control)  # prepared
            check_validators(closing(port, "/songs/song_b"), control)
            conn.close()


@pytest.mark.parametrize("value", ["-1", "soon"])
def test_a_negative_max_age_is_one_line_and_exit_2(value):
    """Refused before Redis is asked (there is none on port 1)."""
    r = cli("serve", "--cache-max-age", value, "--redis", "redis://127.0.0.1:1/0")
    assert r.returncode == 2 and "--cache-max-age" in one_line(r), r.stderr


def test_if_none_match_lists():
    assert matches(b'*', b'"a"') and matches(b' W/"a" ', b'"a"') and matches(b'"b",,W/"a"', b'"a"')
    assert matches(b'"b" , "a"', b'"a"')
    assert not matches(b'"b"', b'"a"') and not matches(b'', b'"a"') and not matches(b'a, "a"', b'"a"')
    assert not matches(b'W/"a', b'"a"')
    assert not matches(b'*', b'"a"', star=False) and matches(b'"a"', b'"a"', star=False)
    assert doctest.testmod(http_cache).failed == 0


# -- boards -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def boards(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The boards' worked example, published once: its namespace."""
    tmp = tmp_path_factory.mktemp("boards-cache")
    path = tmp / "scores.jsonl"
    path.write_bytes(b"".join(row + b"\n" for row in example.LINES))
    namespace = f"b-{uuid.uuid4().hex[:10]}"
    assert run(RunOptions(input=f"jsonl:{path}", until_eof=True, redis_url=redis_url, namespace=namespace,
                          dead_letter=f"jsonl:{tmp / 'dead.jsonl'}", flow="boards", signing_key=example.KEY))
    return namespace


BOARD_READS = ["/boards/g1/all/top", "/boards/g1/all/top?n=2", "/boards/g1/daily/top", "/boards/g1/best/players/bo",
               "/boards/g1/all/players/ana/around?r=1", "/boards"]


@pytest.mark.parametrize("index", ["redis", "memory"])
def test_board_reads_carry_validators_and_answer_304(redis_url, boards, index):
    app = create_app(Settings(redis_url=redis_url, namespace=boards, board_index=index, poll_ms=20,
                              stale_after_ms=3_600_000))  # a slow machine's answers must not turn stale meanwhile
    with served(app) as port:
        conn = Connection(port)
        wait_for(lambda: app.state.board_changes.version, lambda v: v is not None)
        for path in BOARD_READS:
            conn.request(path)  # the first reads fill the shared tops (then prepared)
        before = app.state.prepared.answered
        for path in BOARD_READS:
            kept = same_on_both_paths(app, port, conn, path)
            not_modified_on_both_paths(port, conn, path, header(kept, "etag"))
        assert app.state.prepared.answered > before
        no_store(conn.request("/boards/g1/all/top?n=0"), 400)
        no_store(conn.request("/boards/nope/all/top"), 404)
        no_store(closing(port, "/boards/g1/all/players/nobody"), 404)
        conn.close()


# -- activity -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def activity(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    return run_activity(redis_url, tmp_path_factory.mktemp("activity-cache"), ACTIVITY)["namespace"]


ACTIVITY_READS = ["/activity/A/top", "/activity/global/top?k=2", "/activity/A/channels/x",
                  "/activity/top?workspace=B", "/activity"]


def test_activity_reads_carry_validators_and_answer_304(redis_url, activity):
    app = create_app(Settings(redis_url=redis_url, namespace=activity, poll_ms=20, stale_after_ms=3_600_000))
    with served(app) as port:
        conn = Connection(port)
        wait_for(lambda: app.state.activity_watch.version, lambda v: v is not None)
        for path in ACTIVITY_READS:
            kept = same_on_both_paths(app, port, conn, path)
            not_modified_on_both_paths(port, conn, path, header(kept, "etag"))
        no_store(conn.request("/activity/A/top?k=0"), 400)
        no_store(conn.request("/activity/A/channels/nope"), 404)
        conn.close()


# -- board and activity answers turning stale ---------------------------------------------------

FRESH_FOR_MS = 4000
"""How long, from the service's start, the fresh snapshot stays fresh: the bound is its age then plus this."""


def turning_stale(redis_url: str, namespace: str, product_namespace: str, paths: list[str], ready: Any,
                  prepared: bool, **settings: Any) -> None:
    """Each of ``paths`` (a snapshot-backed read of ``product_namespace``'s snapshot, just published)
    says ``"stale": false`` with a tag without ``-stale`` on both paths (a keep-alive ``GET``, prepared
    when the route has it ready, and a ``Connection: close`` one), then, once older than the bound
    (``--stale-after-ms``), ``"stale": true`` with another tag ending ``-stale``, as the listeners'. The
    bound is the snapshot's age at the service's start plus :data:`FRESH_FOR_MS`: fresh by
    construction first, stale by waiting on the condition after. ``prepared``: some of ``paths``
    are prepared answers on a keep-alive connection."""
    client = redis.Redis.from_url(redis_url)
    published_at = stored_published_at(client, product_namespace)
    client.close()
    bound = int(time.time() * 1000) - published_at + FRESH_FOR_MS
    app = create_app(Settings(redis_url=redis_url, namespace=namespace, poll_ms=20, stale_after_ms=bound, **settings))
    with served(app) as port:
        conn = Connection(port)
        wait_for(lambda: ready(app.state), bool)
        for path in paths:
            conn.request(path)  # the first reads fill the shared tops (then prepared)
        before = app.state.prepared.answered
        fresh = {}
        for path in paths:
            for got in (conn.request(path), closing(port, path)):
                body = orjson.loads(got.body)
                assert body["stale"] is False and body["age_ms"] <= bound, (path, body)
                tag = header(got, "etag")
                assert tag is not None and not tag.endswith('-stale"'), (path, tag)
                check_validators(got)
                fresh[path] = tag
        prepared_fresh = app.state.prepared.answered - before
        for path in paths:
            for keep_alive in (True, False):
                got = wait_for(lambda p=path, k=keep_alive: get(conn, port, p, k),
                               lambda r: orjson.loads(r.body)["stale"] is True)
                body = orjson.loads(got.body)
                assert body["age_ms"] > bound and body["published_at"] == published_at, (path, body)
                tag = header(got, "etag")
                assert tag is not None and tag == fresh[path][:-1] + '-stale"', (path, tag, fresh[path])
                check_validators(got)
                # a cache revalidating its fresh copy gets the stale answer, not a 304
                again = get(conn, port, path, keep_alive, f"If-None-Match: {fresh[path]}")
                assert again.status == 200 and orjson.loads(again.body)["stale"] is True, (path, again.status)
            not_modified_on_both_paths(port, conn, path, tag)
        if prepared:
            assert prepared_fresh > 0 and app.state.prepared.answered - before > prepared_fresh, \
                "the keep-alive GETs were prepared answers, fresh and stale"
        conn.close()


def get(conn: Connection, port: int, path: str, keep_alive: bool, *headers: str) -> Response:
    """``GET path`` on the keep-alive connection (prepared when ready) or with ``Connection: close`` (ASGI)."""
    return conn.request(path, *headers) if keep_alive else closing(port, path, *headers)


@pytest.mark.parametrize("index", ["redis", "memory"])
def test_board_answers_turn_stale_as_the_listeners_with_another_tag(redis_url, tmp_path, index):
    """The top (prepared once encoded: ``stale`` spliced per request like ``age_ms``), a player's
    rank (prepared from the mirror with ``--board-index memory``) and an around."""
    path = tmp_path / "scores.jsonl"
    path.write_bytes(b"".join(row + b"\n" for row in example.LINES))
    namespace = f"b-{uuid.uuid4().hex[:10]}"
    assert run(RunOptions(input=f"jsonl:{path}", until_eof=True, redis_url=redis_url, namespace=namespace,
                          dead_letter=f"jsonl:{tmp_path / 'dead.jsonl'}", flow="boards", signing_key=example.KEY))
    turning_stale(redis_url, namespace, boards_namespace(namespace),
                  ["/boards/g1/all/top", "/boards/g1/all/top?n=2", "/boards/g1/best/players/bo",
                   "/boards/g1/all/players/ana/around?r=1"],
                  lambda state: state.board_changes.version is not None and
                  (index == "redis" or state.board_mirror.ready), prepared=True, board_index=index)


def test_activity_answers_turn_stale_as_the_listeners_with_another_tag(redis_url, tmp_path):
    """A workspace's top (path and query forms), the global top, a channel and ``GET /activity``."""
    namespace = run_activity(redis_url, tmp_path, ACTIVITY)["namespace"]
    turning_stale(redis_url, namespace, activity_namespace(namespace),
                  ["/activity/A/top", "/activity/global/top?k=2", "/activity/A/channels/x",
                   "/activity/top?workspace=B", "/activity"],
                  lambda state: state.activity_watch.version is not None, prepared=False)


# -- a 304 asks Redis nothing ---------------------------------------------------------------------

@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[str]:
    """A Redis of the test's own: its command counts are the service's alone."""
    from rankflow.services import LocalRedis, free_port

    service = LocalRedis(free_port(), tmp_path / "redis").start()
    yield service.url
    service.stop()


def commands(client: redis.Redis) -> int:
    """Commands Redis ran so far (``INFO commandstats``), this ``INFO`` included."""
    return sum(stat["calls"] for stat in client.info("commandstats").values())


@contextmanager
def counting(client: redis.Redis) -> Iterator[list[int]]:
    """The commands run meanwhile, besides the two ``INFO``\\ s."""
    counted: list[int] = []
    first = commands(client)
    yield counted
    counted.append(commands(client) - first - 1)


@pytest.mark.redis
def test_a_304_asks_redis_nothing(own_redis, tmp_path):
    flows = FlowRunner(own_redis, tmp_path)
    listeners = flows.run(flows.write_log(LINES))["namespace"]
    path = tmp_path / "scores.jsonl"
    path.write_bytes(b"".join(row + b"\n" for row in example.LINES))
    assert run(RunOptions(input=f"jsonl:{path}", until_eof=True, redis_url=own_redis, namespace=listeners,
                          dead_letter=f"jsonl:{tmp_path / 'dead.jsonl'}", flow="boards", signing_key=example.KEY))
    run_activity(own_redis, tmp_path, ACTIVITY, namespace=listeners)
    client = redis.Redis.from_url(own_redis)
    # the readers look once at start, then only when a publish is announced: none comes
    app = create_app(Settings(redis_url=own_redis, namespace=listeners, poll_ms=600_000))
    with served(app) as port:
        conn = Connection(port)
        wait_for(lambda: (app.state.board_changes.version, app.state.activity_watch.version, app.state.cache.fresh),
                 lambda v: all(v))
        reads = ["/rankings?k=2", "/songs/song_b", "/boards/g1/all/players/bo", "/boards/g1/all/top",
                 "/activity/A/top", "/activity/A/channels/x"]
        tags = {p: header(wait_for(lambda p=p: conn.request(p), lambda r: r.status == 200), "etag") for p in reads}
        with counting(client) as idle:
            pass
        assert idle == [0]
        with counting(client) as answered:
            for _ in range(20):
                for p in reads:
                    assert conn.request(p, f"If-None-Match: {tags[p]}").status == 304
                    assert closing(port, p, f"If-None-Match: {tags[p]}").status == 304
        assert answered == [0], "a 304 asked Redis"
        with counting(client) as read:
            assert conn.request("/boards/g1/all/players/bo").status == 200
        assert read[0] > 0, "a board read asks Redis (the test would prove nothing otherwise)"
        conn.close()
    client.close()


# -- nginx in front (docs/examples/nginx.conf, as rankflow.services.LocalNginx runs it) ---------------

def publish_all(redis_url: str, tmp: Path, namespace: str, flows: FlowRunner) -> None:
    """The three products' snapshots in ``namespace``."""
    flows.run(flows.write_log(LINES, "a.jsonl"), namespace=namespace)
    scores = tmp / "scores.jsonl"
    scores.write_bytes(b"".join(row + b"\n" for row in example.LINES))
    assert run(RunOptions(input=f"jsonl:{scores}", until_eof=True, redis_url=redis_url, namespace=namespace,
                          dead_letter=f"jsonl:{tmp / 'dead.jsonl'}", flow="boards", signing_key=example.KEY))
    run_activity(redis_url, tmp, ACTIVITY, namespace=namespace)


PER_REQUEST = ("age_ms", "now", "watermark_lag_ms")
"""What an answer says of the moment it was made (``GET /activity`` has the clock and the lag too)."""


def ageless(body: bytes) -> Any:
    doc = orjson.loads(body)
    for name in PER_REQUEST:
        doc.pop(name, None)
    return doc


@contextmanager
def behind_nginx(app: Any, tmp: Path) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    """``app`` served as ``rankflow serve`` serves it, nginx in front: clients of nginx and of the service."""
    from rankflow.services import LocalNginx, free_port

    with served(app) as port:
        nginx = LocalNginx(free_port(), tmp / "nginx", upstream=port).start()
        try:
            with httpx.Client(base_url=nginx.url, timeout=30) as proxy, \
                    httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as direct:
                yield proxy, direct
        finally:
            nginx.stop()


MAX_AGE_S = 2


def test_nginx_serves_the_reads_from_its_cache_and_follows_new_snapshots(redis_url, namespace, flow, tmp_path):
    publish_all(redis_url, tmp_path, namespace, flow)
    app = create_app(Settings(redis_url=redis_url, namespace=namespace, poll_ms=20, cache_max_age_s=MAX_AGE_S))
    with behind_nginx(app, tmp_path) as (proxy, direct):
        wait_for(lambda: (app.state.board_changes.version, app.state.activity_watch.version, app.state.cache.fresh),
                 lambda v: all(v))
        for path in ["/rankings?k=2", "/rankings/recent", "/songs/song_b", *BOARD_READS, *ACTIVITY_READS]:
            asked = time.monotonic()
            miss = proxy.get(path)
            assert miss.status_code == 200 and miss.headers["x-cache"] == "MISS", (path, miss.headers)
            again = proxy.get(path)
            if time.monotonic() - asked < MAX_AGE_S:  # within max-age (a loaded machine may be slower)
                assert again.headers["x-cache"] == "HIT", (path, again.headers)
                assert again.content == miss.content, "a HIT is the bytes of the MISS that filled it"
            own = direct.get(path)
            assert ageless(miss.content) == ageless(own.content), path
            for name in VALIDATORS:
                assert miss.headers[name] == own.headers[name], (path, name)

        for path in ("/rankings?k=2", "/boards/g1/all/players/bo", "/activity/A/top"):  # nginx's own 304s
            cached = proxy.get(path)
            again = proxy.get(path, headers={"If-None-Match": cached.headers["etag"]})
            assert again.status_code == 304 and again.content == b"", (path, again.status_code)

        for path in ("/rankings?k=0", "/songs/nothing", "/boards/nope/all/top", "/activity/A/channels/nope"):
            for _ in range(2):
                refused = proxy.get(path)
                assert refused.status_code in (400, 404) and refused.headers["x-cache"] == "MISS", path
                assert refused.headers["cache-control"] == "no-store"

        # past max-age without a new snapshot: nginx revalidates, the service answers 304
        path = "/rankings?k=2"
        first = proxy.get(path)
        seen = wait_for(lambda: proxy.get(path), lambda r: r.headers["x-cache"] != "HIT")
        assert seen.headers["x-cache"] in ("REVALIDATED", "STALE", "UPDATING", "EXPIRED"), seen.headers
        assert ageless(seen.content) == ageless(first.content)
        wait_for(lambda: _metric(direct.get("/metrics").text, "/rankings", "304"), lambda n: n > 0)

        old = orjson.loads(first.content)["snapshot_id"]
        flow.run(flow.write_log(MORE, "b.jsonl"), namespace=namespace)  # a new snapshot
        newer = wait_for(lambda: proxy.get(path), lambda r: orjson.loads(r.content)["snapshot_id"] != old)
        assert ageless(newer.content) == ageless(direct.get(path).content)
        assert newer.headers["etag"] != first.headers["etag"]


def _metric(text: str, route: str, status: str) -> float:
    prefix = f'rankflow_api_requests_total{{route="{route}",status="{status}"}} '
    return sum(float(x[len(prefix):]) for x in text.splitlines() if x.startswith(prefix))


def test_an_event_stream_through_nginx_is_not_buffered(redis_url, namespace, flow, tmp_path):
    flow.run(flow.write_log(LINES, "a.jsonl"), namespace=namespace)
    app = create_app(Settings(redis_url=redis_url, namespace=namespace, poll_ms=20))
    with behind_nginx(app, tmp_path) as (proxy, _):
        wait_for(lambda: app.state.cache.fresh, bool)
        with proxy.stream("GET", "/rankings/stream?k=2") as stream:
            lines = stream.iter_lines()
            first = next_event(lines)
            assert first["full"] is True
            flow.run(flow.write_log(MORE, "b.jsonl"), namespace=namespace)
            second = next_event(lines)  # arrives while the stream is open: nothing held back
            assert second["snapshot_id"] > first["snapshot_id"] and second["full"] is False


def next_event(lines: Iterator[str]) -> dict[str, Any]:
    data = None
    for text in lines:
        if text.startswith("data: "):
            data = orjson.loads(text[6:])
        elif text == "" and data is not None:
            return data
    raise AssertionError("the stream ended")
