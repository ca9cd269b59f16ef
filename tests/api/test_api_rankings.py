"""The reader API against real Redis: rankings, one song, the live stream, health, metrics."""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import sys
import threading
import time

import httpx

import orjson
import pytest
from fastapi.testclient import TestClient

from rankflow.api.app import Settings, create_app
from rankflow.api.rankings import diff_event
from rankflow.api.store import SnapshotCache
from rankflow.connectors.redis_generations import join_run
from rankflow.connectors.redis_keys import Keys
from rankflow.connectors.redis_listeners import CountTable
from rankflow.connectors.redis_publish import Publisher
from rankflow.services import free_port
from rankflow.state.snapshot import Snapshot, snapshot_id
from tests.api.raw_http import Connection, served
from tests.events import ev


def eventually(fetch, ok, timeout: float = 10.0):
    """The API sees a new snapshot within its poll interval: ask until it does."""
    deadline = time.monotonic() + timeout
    while True:
        response = fetch()
        if ok(response) or time.monotonic() > deadline:
            return response
        time.sleep(0.02)


@pytest.fixture
def api(redis_url, namespace):
    with TestClient(create_app(Settings(redis_url=redis_url, namespace=namespace, poll_ms=20))) as client:
        yield client


LINES = [ev("u1", "p1", "song_a", "START", 1), ev("u2", "p2", "song_b", "START", 1),
         ev("u3", "p3", "song_b", "START", 1)]


def test_rankings_fresh_then_stale_then_fresh(flow, api, redis_client, namespace):
    path = flow.write_log(LINES)
    assert api.get("/rankings").status_code == 503  # nothing published yet, nothing seen
    assert api.get("/health").json()["status"] == "degraded"
    flow.run(path, namespace=namespace, k_max=5)
    r = eventually(lambda: api.get("/rankings", params={"k": 1}), lambda r: r.status_code == 200)
    body = r.json()
    assert body["items"] == [{"rank": 1, "song_id": "song_b", "listeners": 2}]
    assert body["stale"] is False and body["total_listeners"] == 3 and body["age_ms"] >= 0
    assert body["positions"] == {path: 3}
    assert api.get("/rankings", params={"k": 6}).status_code == 400
    assert api.get("/rankings", params={"k": 0}).status_code == 400
    assert api.get("/health").json()["status"] == "ok"

    redis_client.delete(*redis_client.keys(f"{{{namespace}}}:*"))  # Redis lost its data
    r = eventually(lambda: api.get("/rankings", params={"k": 2}), lambda r: r.status_code == 503)
    assert r.status_code == 503
    assert r.json()["stale"] is True and r.json()["snapshot_id"] == body["snapshot_id"]
    assert "no usable ranking" in r.json()["error"]
    assert api.get("/health").status_code == 503

    flow.run(path, namespace=namespace, k_max=5)  # a rebuild or the live run restores it
    r = eventually(lambda: api.get("/rankings", params={"k": 2}), lambda r: r.status_code == 200)
    assert r.status_code == 200 and r.json()["stale"] is False


def test_song_listeners_and_rank(flow, api, namespace):
    lines = LINES + [ev("u4", "p4", "song_c", "START", 1), ev("u1", "p1", "song_a", "STOP", 1)]
    flow.run(flow.write_log(lines), namespace=namespace)
    snap = eventually(lambda: api.get("/rankings"), lambda r: r.status_code == 200).json()
    assert api.get("/songs/song_b").json() == {"snapshot_id": snap["snapshot_id"], "song_id": "song_b",
                                              "listeners": 2, "rank": 1}
    assert api.get("/songs/song_c").json()["rank"] == 2
    assert api.get("/songs/song_a").status_code == 404  # stopped: no listeners
    assert api.get("/songs/nothing").status_code == 404


def test_stream_sends_the_top_k_then_only_changes(flow, api, namespace):
    flow.run(flow.write_log(LINES, "a.jsonl"), namespace=namespace)
    eventually(lambda: api.get("/rankings"), lambda r: r.status_code == 200)
    with api.stream("GET", "/rankings/stream", params={"k": 2}) as stream:
        lines = stream.iter_lines()
        events = _events(lines, 1)
        assert events[0]["full"] is True and events[0]["size"] == 2
        assert [(i["song_id"], i["listeners"]) for i in events[0]["changed"]] == [("song_b", 2), ("song_a", 1)]
        more = LINES + [ev("u9", "p9", "song_z", "START", 1), ev("u8", "p8", "song_z", "START", 1),
                        ev("u7", "p7", "song_z", "START", 1)]
        flow.run(flow.write_log(more, "b.jsonl"), namespace=namespace)
        events = _events(lines, 1)
    assert events[0]["full"] is False
    assert [(i["rank"], i["song_id"]) for i in events[0]["changed"]] == [(1, "song_z"), (2, "song_b")]
    assert events[0]["removed"] == ["song_a"]


def _events(lines, n: int) -> list[dict]:
    out, data = [], None
    for line in lines:
        if line.startswith("data: "):
            data = orjson.loads(line[6:])
        elif line == "" and data is not None:
            out.append(data)
            data = None
            if len(out) == n:
                return out
    return out


def test_diff_event_reports_only_changes():
    snap = {"snapshot_id": 2, "published_at": 0, "total_listeners": 5,
            "items": [{"rank": 1, "song_id": "a", "listeners": 3}, {"rank": 2, "song_id": "b", "listeners": 2}]}
    assert diff_event(snap["items"], snap, 2) is None
    old = [{"rank": 1, "song_id": "a", "listeners": 3}, {"rank": 2, "song_id": "c", "listeners": 2}]
    event = diff_event(old, snap, 2)
    assert event["changed"] == [{"rank": 2, "song_id": "b", "listeners": 2}] and event["removed"] == ["c"]


def test_openapi_and_metrics(api):
    schema = api.get("/openapi.json").json()
    assert {"/rankings", "/songs/{song_id}", "/rankings/stream", "/events", "/health", "/metrics"} <= set(schema["paths"])
    api.get("/rankings")
    assert "rankflow_api_requests_total" in api.get("/metrics").text
    assert "rankflow" in api.get("/").text


def _snapshot(run: int, epoch: int, counts: dict[str, int], full: bool) -> Snapshot:
    return Snapshot(snapshot_id(run, epoch), run, epoch, {"f": epoch}, 0, 0, 0, 0, 10, [], {}, [], [], counts, full)


def _expected(table: dict[str, int], song: str) -> tuple[int, int] | None:
    order = sorted(((c, s) for s, c in table.items() if c > 0), reverse=True)
    return next(((c, i) for i, (c, s) in enumerate(order, 1) if s == song), None)


def test_the_service_follows_the_count_table_through_changes_gaps_and_loss(redis_client, redis_url, namespace):
    """The service's own copy of the table equals Redis's after every refresh: through
    chains of changes, a gap in the capped changes stream (reload) and a Redis that
    lost everything (the publisher resends the whole table)."""
    rng = random.Random(5)
    songs = [f"s{i}" for i in range(25)]
    token = join_run(redis_client, namespace, "follow")[0]
    publisher = Publisher(redis_url, namespace, token, state=CountTable())
    table: dict[str, int] = {}

    async def scenario() -> None:
        cache = SnapshotCache(redis_url, namespace)
        epoch = 0
        try:
            await cache.refresh()
            assert not cache.fresh and cache.song("s1") is None
            for step in range(45):
                for _ in range(rng.randint(1, 3)):
                    epoch += 1
                    changes = {rng.choice(songs): rng.randint(0, 6) for _ in range(rng.randint(0, 6))}
                    table.update(changes)
                    assert publisher.publish(_snapshot(token, epoch, changes, full=epoch == 1)) == 1
                if step == 15:
                    redis_client.xtrim(Keys(namespace).changes, maxlen=0)  # the entries this reader needs
                    epoch += 1
                    assert publisher.publish(_snapshot(token, epoch, {"s0": 1}, full=False)) == 1
                    table["s0"] = 1
                if step == 30:
                    last_id = redis_client.xrevrange(Keys(namespace).changes, count=1)[0][0]
                    redis_client.delete(*redis_client.keys(f"{{{namespace}}}:*"))  # Redis lost its data
                    _clock_past(redis_client, int(last_id.split(b"-")[0]))
                    await cache.refresh()
                    assert not cache.fresh and cache.snapshot is not None, "the last snapshot is kept (stale)"
                    epoch += 1
                    assert publisher.publish(_snapshot(token, epoch, {"s1": 2}, full=False)) == 1
                    table["s1"] = 2
                await cache.refresh()
                assert cache.fresh and cache.snapshot["snapshot_id"] == snapshot_id(token, epoch)
                for song in songs:
                    answer = cache.song(song)
                    expected = _expected(table, song)
                    assert (None if answer is None else (answer["listeners"], answer["rank"])) == expected, song
                    assert answer is None or answer["snapshot_id"] == cache.snapshot["snapshot_id"]
            assert cache.table_loads == 2, "one load at start, one after the gap; changes otherwise"
        finally:
            await cache.stop()

    asyncio.run(scenario())


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("stop, status, inherited", [
    (signal.SIGINT, 130, None),
    (signal.SIGINT, 130, _ignore_sigint),  # started as `rankflow serve &` from a script: SIGINT ignored at exec
    (signal.SIGTERM, 143, None),
], ids=["ctrl-c", "ctrl-c-of-a-background-job", "sigterm"])
def test_ctrl_c_stops_the_service_while_a_stream_is_open(redis_url, namespace, stop, status, inherited):
    """An open event stream (a dashboard left open) must not hold the shutdown, and the exit
    status says which signal stopped the service, whatever the signal's inherited disposition."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "rankflow.cli", "serve", "--port", str(port),
                               "--redis", redis_url, "--namespace", namespace],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=inherited)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(base + "/health")
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline and server.poll() is None, "the service did not start"
                time.sleep(0.1)
        opened = threading.Event()

        def listen() -> None:
            with httpx.stream("GET", base + "/rankings/stream", timeout=None) as stream:
                opened.set()
                for _ in stream.iter_raw():
                    pass

        threading.Thread(target=listen, daemon=True).start()
        assert opened.wait(10)
        server.send_signal(stop)
        _, stderr = server.communicate(timeout=15)
        assert server.returncode == status, stderr.decode()  # as for `rankflow run`
        assert stderr.decode().splitlines()[-1] == "rankflow: interrupted"
        assert b"Exception in ASGI application" not in stderr
    finally:
        if server.poll() is None:
            server.kill()


def test_a_changes_entry_it_cannot_read_makes_the_service_stale_then_it_recovers(redis_client, redis_url,
                                                                                   namespace):
    """The poller outlives a bad read: stale meanwhile, a whole-table reload afterwards."""
    token = join_run(redis_client, namespace, "bad")[0]
    publisher = Publisher(redis_url, namespace, token, state=CountTable())

    async def scenario() -> None:
        cache = SnapshotCache(redis_url, namespace, poll_ms=10)
        await cache.start()
        try:
            assert publisher.publish(_snapshot(token, 1, {"a": 1}, full=True)) == 1
            await _until(lambda: cache.fresh and cache.song("a") is not None)
            redis_client.xadd(Keys(namespace).changes, {"not": "ours"})  # an entry without our fields
            redis_client.set(Keys(namespace).snapshot_id, snapshot_id(token, 2))
            await _until(lambda: not cache.fresh)
            assert "cannot read" in cache.problem and cache.song("a") is not None, "the last answer is kept"
            assert publisher.publish(_snapshot(token, 3, {"b": 2}, full=False)) == 1
            await _until(lambda: cache.fresh and cache.song("b") is not None)
            assert cache.table_loads == 2 and cache.song("a")["rank"] == 2
        finally:
            await cache.stop()

    asyncio.run(scenario())


def _clock_past(client, ms: int) -> None:
    """Wait until Redis's clock is past ``ms``. A new stream's first id is the current
    millisecond's; within the millisecond of the lost stream's last entry it would not
    follow the reader's position, and the reader would (rightly) load the whole table
    again: a real loss of data takes longer than that."""
    while True:
        seconds, micros = client.time()
        if seconds * 1000 + micros // 1000 > ms:
            return


async def _until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


def test_recent_plays_fresh_bad_k_and_stale(flow, api, redis_client, namespace):
    lines = [ev("u1", "p1", "song_a", "START", 1, 60_000), ev("u2", "p2", "song_b", "START", 1, 61_000),
             ev("u3", "p3", "song_b", "START", 1, 62_000), ev("u3", "p3", "song_b", "STOP", 1, 63_000),
             ev("u4", "p4", "song_c", "START", 1, 1_000)]  # before the 1-minute window: a listener only
    path = flow.write_log(lines)
    assert api.get("/rankings/recent").status_code == 503  # nothing published yet, nothing seen
    flow.run(path, namespace=namespace, k_max=5, recent_minutes=1)
    r = eventually(lambda: api.get("/rankings/recent", params={"k": 5}), lambda r: r.status_code == 200)
    body = r.json()
    assert body["items"] == [{"rank": 1, "song_id": "song_b", "plays": 2}, {"rank": 2, "song_id": "song_a", "plays": 1}]
    assert (body["window_start"], body["window_end"], body["watermark"]) == (60_000, 120_000, 63_000)
    assert body["positions"] == {path: 5} and body["stale"] is False and body["age_ms"] >= 0
    assert api.get("/rankings", params={"k": 5}).json()["snapshot_id"] == body["snapshot_id"], "one snapshot"
    assert api.get("/rankings/recent", params={"k": 1}).json()["items"] == body["items"][:1]
    for bad in (0, 6):
        r = api.get("/rankings/recent", params={"k": bad})
        assert r.status_code == 400 and "K_max" in r.json()["error"]
    assert "/rankings/recent" in api.get("/openapi.json").json()["paths"]

    redis_client.delete(*redis_client.keys(f"{{{namespace}}}:*"))  # Redis lost its data
    r = eventually(lambda: api.get("/rankings/recent", params={"k": 2}), lambda r: r.status_code == 503)
    assert r.status_code == 503 and r.json()["stale"] is True and r.json()["items"] == body["items"]
    assert "no usable ranking" in r.json()["error"]


def test_recent_plays_off_is_not_found(flow, api, namespace):
    flow.run(flow.write_log(LINES), namespace=namespace, recent_minutes=0)
    r = eventually(lambda: api.get("/rankings/recent"), lambda r: r.status_code != 503)
    assert r.status_code == 404 and "--recent-minutes 0" in r.json()["error"]
    assert api.get("/rankings").status_code == 200


def test_recent_plays_watermark_beyond_64_bits(flow, api, namespace):
    huge = 2**70
    flow.run(flow.write_log([ev("u1", "p1", "song_a", "START", 1, 7).replace(b"7}", b"%d}" % huge)]),
             namespace=namespace)
    r = eventually(lambda: api.get("/rankings/recent"), lambda r: r.status_code == 200)
    assert b'"watermark":%d' % huge in r.content and r.json()["items"][0]["plays"] == 1


def test_prepared_rankings_are_the_asgi_path_s_answers(flow, redis_url, namespace):
    """``GET /rankings`` written by the server's protocol (``api.prepared``) once a snapshot is
    cached: the ASGI path's answer but for ``age_ms``; every other answer is the ASGI path's."""
    flow.run(flow.write_log(LINES), namespace=namespace, k_max=5)
    settings = Settings(redis_url=redis_url, namespace=namespace, poll_ms=20)
    fast, full = create_app(settings), create_app(settings)
    full.state.prepared = None
    with served(fast) as fast_port, served(full) as full_port:
        a = Connection(fast_port)
        assert eventually(lambda: a.get("/rankings?k=1")[0], lambda r: r.status == 200).status == 200
        b = Connection(full_port)  # now: an idle connection closes after uvicorn's keep-alive timeout
        paths = ["/rankings", "/rankings?k=1", "/rankings?k=5", "/rankings?k=05", "/rankings?k=6", "/rankings?k=0",
                 "/rankings?k=x", "/rankings?k=1&k=2", "/rankings?n=1", "/rankings/", "/songs/song_b"]
        before = fast.state.prepared.answered
        for got, want in ((a.get(p)[0], b.get(p)[0]) for p in paths):  # one at a time: never behind an ASGI one
            assert (got.status, _aged(got.body)) == (want.status, _aged(want.body))
            assert [h for h in got.headers if h[0] not in ("date", "content-length")] == \
                   [h for h in want.headers if h[0] not in ("date", "content-length")]
            assert int(dict(got.headers)["content-length"]) == len(got.body)
        assert fast.state.prepared.answered - before == 3  # k=1, 5, 05 (a repeated k is the ASGI path's)
        a.close()
        b.close()


def _aged(body: bytes) -> object:
    """A body without its age (it differs between two requests); other bodies as they are."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body
    if isinstance(doc, dict):
        doc.pop("age_ms", None)
    return doc
