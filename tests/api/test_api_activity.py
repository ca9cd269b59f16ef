"""The activity rankings over HTTP against what the real activity flow published into a real Redis.

Every route is checked against the sync reader (``connectors.activity_read.ActivityReader``,
the CLI's) to the value, and against the ranks and counts the log makes (docs/semantics/windows.md 4):
usage errors (400), channels without a count (404), nothing published yet (503), ids
holding ``/`` and emoji, the ``global`` and ``/channels/`` cases the query forms resolve,
a watermark beyond 64 bits, and the stream following a live run.
"""

from __future__ import annotations

import doctest
import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import redis
from fastapi.testclient import TestClient

from rankflow.api import activity as activity_api
from rankflow.api import sse
from rankflow.api.app import Settings, create_app
from rankflow.connectors.activity_read import ActivityReader
from rankflow.connectors.redis_keys import activity_namespace
from rankflow.connectors.redis_read import read_latest
from rankflow.connectors.source_batch import STOP
from rankflow.options import RunOptions
from rankflow.runner import run
from tests.activity.test_activity_flow import line, run_activity
from tests.api.stream_client import HeldTop
from tests.snapshot_stamp import ageless, stored_published_at
from tests.window_model import global_ranking, run_model, workspace_ranking

K_MAX = 20
T0 = 1_800_000_000_000  # every event in one 60-bucket window
SLASHED, EMOJI, CHANNELS = "team/eu", "🎉 é|?#%", "x/channels/y"
LOG = [("A", "x", 3), ("A", "y", 2), ("A", "z", 2), ("A", "w", 1),
       (SLASHED, "ch/1", 2), (SLASHED, "general", 1), (EMOJI, "🎈", 1), (EMOJI, "a/b/top", 3),
       ("global", "g1", 4), (CHANNELS, "c", 1)]
EVENTS = [(ws, ch, f"u{i}", T0 + 1000 * n) for n, (ws, ch, times) in enumerate(LOG) for i in range(times)]
WORKSPACES = sorted({ws for ws, _, _ in LOG})


def expected_counts() -> dict[tuple[str, str], int]:
    model = run_model((("p", off, e) for off, e in enumerate(EVENTS)), 60_000, 60)
    return model.counts()


@pytest.fixture(scope="module")
def published(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The log, published once for the module's tests (they only read)."""
    out = run_activity(redis_url, tmp_path_factory.mktemp("activity-api"), [line(*e) for e in EVENTS], k_max=K_MAX)
    published_at = stored_published_at(redis.Redis.from_url(redis_url), activity_namespace(out["namespace"]))
    return {"namespace": out["namespace"], "final": out["final"], "published_at": published_at}


@contextmanager
def serving(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as client:
        yield client


@pytest.fixture(scope="module")
def api(redis_url: str, published: dict[str, Any]) -> Iterator[TestClient]:
    with serving(Settings(redis_url=redis_url, namespace=published["namespace"], poll_ms=20)) as client:
        yield client


class Ageless:
    """A reader whose answers have ``age_ms`` 0 (checked first: at least 0), to compare with the
    routes' (:func:`ok`): the age is the moment's."""

    def __init__(self, reader: ActivityReader) -> None:
        self.reader = reader

    def __getattr__(self, name: str) -> Any:
        def asked(*args: Any) -> Any:
            answer = getattr(self.reader, name)(*args)
            assert answer["age_ms"] >= 0, answer
            return ageless(answer)
        return asked


@pytest.fixture
def reader(redis_client: redis.Redis, published: dict[str, Any]) -> Any:
    return Ageless(ActivityReader(redis_client, published["namespace"]))


def ok(api: TestClient, path: str, **params: Any) -> dict[str, Any]:
    """The route's answer, its ``age_ms`` (at least 0) made 0."""
    r = api.get(path, params=params)
    assert r.status_code == 200, (path, params, r.text)
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert body.get("age_ms", 0) >= 0, body
    return ageless(body)


def top_path(ws: str) -> str:
    return f"/activity/{quote(ws, safe='/')}/top"


def test_docstring_examples():
    result = doctest.testmod(activity_api)
    assert result.attempted > 0 and result.failed == 0


def test_workspace_tops_are_the_readers_and_the_logs(api, reader, published):
    counts = expected_counts()
    for ws in WORKSPACES:
        if ws in ("global", CHANNELS):
            continue  # their path forms mean something else: see test_global_and_channels_in_ids
        for k in (1, 2, 10, K_MAX):
            for path in (top_path(ws), f"/activity/{quote(ws, safe='')}/top"):  # "/" as is or as %2F
                body = ok(api, path, k=k)
                assert body == reader.top(ws, k), (ws, k)
                assert body["snapshot_id"] == published["final"]["snapshot_id"]
                assert body["published_at"] == published["published_at"]
                assert list(body) == ["snapshot_id", "published_at", "age_ms", "workspace_id", "window_start",
                                      "window_end", "watermark", "items"]
                assert [(i["channel_id"], i["count"]) for i in body["items"]] == workspace_ranking(counts, ws)[:k]
                assert [i["rank"] for i in body["items"]] == list(range(1, len(body["items"]) + 1))
            assert ok(api, "/activity/top", workspace=ws, k=k) == reader.top(ws, k)
        assert ok(api, top_path(ws)) == reader.top(ws, 10), "k defaults to 10"
    final = published["final"]
    body = ok(api, "/activity/A/top")
    assert (body["window_start"], body["window_end"], body["watermark"]) == (
        final["window_start"], final["window_end"], final["watermark"])
    assert [(i["rank"], i["channel_id"], i["count"]) for i in body["items"]] == [
        (1, "x", 3), (2, "z", 2), (3, "y", 2), (4, "w", 1)], "ties: channel_id descending (docs/semantics/windows.md 4)"
    assert ok(api, "/activity/nobody/top")["items"] == [], "a workspace without counts"


def test_the_global_top(api, reader):
    counts = expected_counts()
    for k in (1, 3, 10, K_MAX):
        body = ok(api, "/activity/global/top", k=k)
        assert body == reader.global_top(k)
        assert "workspace_id" not in body
        assert [(i["workspace_id"], i["channel_id"], i["count"]) for i in body["items"]] == [
            (ws, ch, n) for (ws, ch), n in global_ranking(counts)[:k]]
    top = ok(api, "/activity/global/top", k=3)["items"]
    assert top == [{"rank": 1, "workspace_id": "global", "channel_id": "g1", "count": 4},
                   {"rank": 2, "workspace_id": EMOJI, "channel_id": "a/b/top", "count": 3},
                   {"rank": 3, "workspace_id": "A", "channel_id": "x", "count": 3}]


def test_every_channel_lookup(api, reader, published):
    counts = expected_counts()
    for (ws, ch), n in counts.items():
        expected = reader.channel(ws, ch)
        rank = [c for c, _ in workspace_ranking(counts, ws)].index(ch) + 1
        assert expected == {"snapshot_id": published["final"]["snapshot_id"],
                            "published_at": published["published_at"], "age_ms": 0, "workspace_id": ws,
                            "channel_id": ch, "count": n, "rank": rank}
        assert ok(api, "/activity/channel", workspace=ws, channel=ch) == expected
        if CHANNELS not in ws:
            for w in (quote(ws, safe="/"), quote(ws, safe="")):
                for c in (quote(ch, safe="/"), quote(ch, safe="")):
                    assert ok(api, f"/activity/{w}/channels/{c}") == expected, (ws, ch)


def test_channels_without_a_count_are_404(api):
    for path, params, message in [
        ("/activity/A/channels/nope", {}, "channel 'nope' of workspace 'A' has no count"),
        ("/activity/nobody/channels/x", {}, "channel 'x' of workspace 'nobody' has no count"),
        ("/activity/A/channels/x/", {}, "channel 'x/' of workspace 'A'"),
        ("/activity/channel", {"workspace": "A", "channel": "X"}, "channel 'X' of workspace 'A'"),
        ("/activity/" + quote(EMOJI, safe="") + "/channels/🎈🎈", {}, f"channel '🎈🎈' of workspace '{EMOJI}'"),
    ]:
        r = api.get(path, params=params)
        assert r.status_code == 404 and r.json()["error"].startswith(message), (path, r.text)


def test_global_and_channels_in_ids(api, reader):
    """The path forms' two fixed meanings (the global ranking, a split at the first
    ``/channels/``); the query forms and the other paths reach those workspaces."""
    assert ok(api, "/activity/global/top") == reader.global_top(10), "the global route wins"
    assert ok(api, "/activity/top", workspace="global") == reader.top("global", 10) != reader.global_top(10)
    assert ok(api, "/activity/global/channels/g1") == reader.channel("global", "g1")
    assert ok(api, "/activity/top", workspace=CHANNELS, k=5)["items"] == [{"rank": 1, "channel_id": "c", "count": 1}]
    assert ok(api, "/activity/channel", workspace=CHANNELS, channel="c")["rank"] == 1
    r = api.get(top_path(CHANNELS))  # workspace "x", channel "y/top"
    assert r.status_code == 404 and r.json()["error"].startswith("channel 'y/top' of workspace 'x'")
    # a channel id that ends like a route is still the rest of the path
    assert ok(api, f"/activity/{quote(EMOJI)}/channels/a/b/top") == reader.channel(EMOJI, "a/b/top")


def test_usage_errors_are_400_never_clamped(api):
    for path, params, message in [
        ("/activity/A/top", {"k": 0}, "k must be between 1 and K_max, got 0"),
        ("/activity/A/top", {"k": K_MAX + 1}, f"k must be between 1 and K_max = {K_MAX}, got {K_MAX + 1}"),
        ("/activity/A/top", {"k": -3}, "k must be between 1 and K_max"),
        ("/activity/A/top", {"k": "ten"}, "k: "),
        ("/activity/A/top", {"k": 1.5}, "k: "),
        ("/activity/global/top", {"k": 0}, "k must be between 1 and K_max"),
        ("/activity/global/top", {"k": K_MAX + 1}, f"k must be between 1 and K_max = {K_MAX}, got {K_MAX + 1}"),
        ("/activity/global/top", {"k": "ten"}, "k: "),
        ("/activity/top", {"workspace": "A", "k": K_MAX + 1}, "k must be between 1 and K_max"),
        ("/activity/top", {"workspace": "A", "k": ""}, "k: "),
        ("/activity/top", {"k": 5}, "workspace: "),
        ("/activity/channel", {"workspace": "A"}, "channel: "),
        ("/activity/stream", {}, "workspace: "),
        ("/activity/top", {"workspace": ""}, "workspace: "),
        ("/activity/channel", {"workspace": "A", "channel": ""}, "channel: "),
        ("/activity/nobody/top", {"k": K_MAX + 1}, "k must be between 1 and K_max"),
    ]:
        r = api.get(path, params=params)
        assert r.status_code == 400 and r.json()["error"].startswith(message), (path, params, r.text)


def test_the_current_snapshot_and_the_watermark_lag(api, published):
    final = published["final"]
    before = int(time.time() * 1000)
    body = ok(api, "/activity")
    after = int(time.time() * 1000)
    assert {k: body[k] for k in ("snapshot_id", "published_at", "watermark", "window_start", "window_end",
                                 "bucket_ms", "window_buckets", "count", "k_max", "active_pairs")} == {
        k: final[k] for k in ("snapshot_id", "published_at", "watermark", "window_start", "window_end",
                              "bucket_ms", "window_buckets", "count", "k_max", "active_pairs")}
    assert before <= body["now"] <= after
    assert body["watermark_lag_ms"] == body["now"] - final["watermark"]
    assert body["published_lag_ms"] == final["published_at"] - final["watermark"]


def test_health_names_the_activity_snapshot(api, published):
    """No listener ranking in the namespace: the service is healthy with the activity snapshot."""
    deadline = time.monotonic() + 10
    while (body := api.get("/health").json())["activity_snapshot_id"] is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert body["activity_snapshot_id"] == published["final"]["snapshot_id"]
    assert body["status"] == "ok" and body["snapshot_id"] is None


def test_openapi_lists_the_routes_without_422(api):
    paths = api.get("/openapi.json").json()["paths"]
    expected = {"/activity": {"200", "503"}, "/activity/global/top": {"200", "400", "503"},
                "/activity/{workspace}/top": {"200", "400", "503"},
                "/activity/{workspace}/channels/{channel}": {"200", "404", "503"},
                "/activity/{workspace}/stream": {"200", "503"}, "/activity/top": {"200", "400", "503"},
                "/activity/channel": {"200", "400", "404", "503"}, "/activity/stream": {"200", "400", "503"}}
    for path, responses in expected.items():
        cached = set() if path.endswith("/stream") else {"304"}  # If-None-Match on the reads (api.openapi_cache)
        assert set(paths[path]["get"]["responses"]) == responses | cached, path  # 400, never 422


def test_before_any_snapshot_every_route_is_503(redis_url):
    namespace = f"none-{uuid.uuid4().hex[:8]}"
    with serving(Settings(redis_url=redis_url, namespace=namespace)) as api:
        for path in ("/activity", "/activity/global/top", "/activity/A/top", "/activity/A/channels/x",
                     "/activity/A/stream", "/activity/top?workspace=A", "/activity/channel?workspace=A&channel=x",
                     "/activity/stream?workspace=A", "/activity/A/top?k=1000"):
            r = api.get(path)
            assert r.status_code == 503, (path, r.text)
            assert r.json() == {"error": f"no activity snapshot published yet in namespace '{namespace}:activity'"}
        assert api.get("/activity/A/top", params={"k": 0}).status_code == 400, "a usage error whatever is published"
        body = api.get("/health").json()
        assert body["activity_snapshot_id"] is None and body["status"] == "degraded"


def test_unreachable_redis_is_a_503():
    from rankflow.services import free_port

    with serving(Settings(redis_url=f"redis://127.0.0.1:{free_port()}/0")) as api:
        for path in ("/activity", "/activity/global/top", "/activity/A/top", "/activity/A/channels/x",
                     "/activity/A/stream"):
            r = api.get(path)
            assert r.status_code == 503 and "cannot read the activity rankings" in r.json()["error"], path


def test_a_watermark_beyond_64_bits_is_answered_exactly(redis_url, redis_client, tmp_path):
    huge = 10**30
    raw = json.dumps({"workspace_id": "A", "channel_id": "x", "user_id": "u", "ts": huge}).encode()
    out = run_activity(redis_url, tmp_path, [raw])
    reader = ActivityReader(redis_client, out["namespace"])
    with serving(Settings(redis_url=redis_url, namespace=out["namespace"])) as api:
        for path, expected in [("/activity/A/top", reader.top("A", 10)), ("/activity/global/top", reader.global_top(10)),
                               ("/activity/top?workspace=A", reader.top("A", 10))]:
            r = api.get(path)
            assert r.status_code == 200 and ageless(json.loads(r.content)) == ageless(expected), path
            assert json.loads(r.content)["watermark"] == huge
        body = json.loads(api.get("/activity").content)
        assert body["watermark"] == huge and body["window_end"] == (huge // 60_000 + 1) * 60_000
        assert body["published_lag_ms"] == body["published_at"] - huge
        with api.stream("GET", "/activity/A/stream") as stream:
            [(kind, data)] = sse_events(stream.iter_lines(), 1, loads=json.loads)
        assert kind == "activity" and data["full"] is True
        assert ageless(HeldTop().apply(data)) == ageless(reader.top("A", 10))


# -- the stream, on a flow that follows a growing log -----------------------------------------

class LiveActivity:
    """The activity flow following a file: :meth:`append` returns once the lines are published."""

    def __init__(self, redis_url: str, tmp: Path) -> None:
        self.path = tmp / "live-messages.jsonl"
        self.path.write_bytes(b"")
        self.namespace = f"a-{uuid.uuid4().hex[:10]}"
        self.client = redis.Redis.from_url(redis_url)
        self.lines = 0
        self.failure: list[BaseException] = []
        opts = RunOptions(input=f"jsonl:{self.path}", redis_url=redis_url, namespace=self.namespace, flow="activity",
                          dead_letter=f"jsonl:{tmp / 'live-dead.jsonl'}", barrier_ms=50)
        self.thread = threading.Thread(target=self._run, args=(opts,), name="activity-flow")

    def _run(self, opts: RunOptions) -> None:
        try:
            run(opts)
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            self.failure.append(exc)

    def append(self, *events: tuple[str, str, str, int]) -> dict[str, Any]:
        with open(self.path, "ab") as out:
            out.write(b"".join(line(*e) + b"\n" for e in events))
        self.lines += len(events)
        deadline = time.monotonic() + 60
        while (snap := read_latest(self.client, activity_namespace(self.namespace))) is None \
                or snap["positions"][str(self.path)] < self.lines:
            assert not self.failure and time.monotonic() < deadline, f"never published: {self.failure}"
            time.sleep(0.005)
        return snap


@contextmanager
def live_activity(redis_url: str, tmp: Path) -> Iterator[LiveActivity]:
    live = LiveActivity(redis_url, tmp)
    live.thread.start()
    try:
        yield live
    finally:
        STOP.set()
        live.thread.join(timeout=60)
        live.client.close()
    assert not live.failure, live.failure


def sse_events(lines: Iterator[str], n: int, loads: Any = json.loads) -> list[tuple[str, dict[str, Any]]]:
    """The next ``n`` events of a stream as ``(event name, data)``, skipping comments; an
    event's ``id`` must be its data's snapshot id."""
    out: list[tuple[str, dict[str, Any]]] = []
    name, data, event_id = "message", None, None
    for text in lines:
        if text.startswith("event: "):
            name = text[7:]
        elif text.startswith("id: "):
            event_id = int(text[4:])
        elif text.startswith("data: "):
            data = loads(text[6:])
        elif text == "" and data is not None:
            assert event_id == data["snapshot_id"], (event_id, data)
            out.append((name, data))
            name, data, event_id = "message", None, None
            if len(out) == n:
                break
    return out


def items(top: dict[str, Any]) -> list[tuple[int, str, int]]:
    return [(i["rank"], i["channel_id"], i["count"]) for i in top["items"]]


def is_the_route_answer(api: TestClient, path: str, held: HeldTop) -> bool:
    """Whether the top ``held`` rebuilt from a stream is what ``path``'s JSON answers (of the same
    snapshot, or of a later one saying the same)."""
    return held.is_answer(api.get(path).json())


def test_streams_follow_the_workspaces_top(redis_url, redis_client, tmp_path):
    """An event at once, then one when a snapshot changes the workspace's top; a snapshot
    that changes only another workspace (and moves the watermark) sends nothing."""
    with live_activity(redis_url, tmp_path) as live:
        live.append(("A", "x", "u1", T0), ("A", "y", "u1", T0 + 1), ("A", "y", "u2", T0 + 2),
                    (EMOJI, "c/1", "u1", T0 + 3))
        reader = ActivityReader(redis_client, live.namespace)
        with serving(Settings(redis_url=redis_url, namespace=live.namespace, poll_ms=20)) as api:
            with api.stream("GET", "/activity/A/stream") as a_stream, \
                    api.stream("GET", "/activity/stream", params={"workspace": EMOJI}) as emoji_stream, \
                    api.stream("GET", f"/activity/{quote(EMOJI)}/stream") as emoji_path_stream:
                assert a_stream.headers["content-type"].startswith("text/event-stream")
                a_lines, emoji_lines = a_stream.iter_lines(), emoji_stream.iter_lines()
                held_a, held_emoji = HeldTop(), HeldTop()
                [(kind, event)] = sse_events(a_lines, 1)
                assert kind == "activity" and event["full"] is True
                first = held_a.apply(event)
                assert held_a.is_answer(reader.top("A", 10)) and is_the_route_answer(api, "/activity/A/top", held_a)
                assert items(first) == [(1, "y", 2), (2, "x", 1)]
                first_emoji = held_emoji.apply(sse_events(emoji_lines, 1)[0][1])
                assert first_emoji["workspace_id"] == EMOJI and items(first_emoji) == [(1, "c/1", 1)]
                by_path = HeldTop()
                by_path.apply(sse_events(emoji_path_stream.iter_lines(), 1)[0][1])  # opened a little later: a live
                # run publishes at every barrier, so its first event may be of a newer snapshot, saying the same
                assert held_emoji.is_answer(by_path.answer)

                only_emoji = live.append((EMOJI, "c/1", "u2", T0 + 60_000))  # the watermark moves a bucket on
                assert only_emoji["watermark"] > first["watermark"]
                [(_, event)] = sse_events(emoji_lines, 1)
                assert (event["full"], event["changed"], event["removed"], event["size"]) == (
                    False, [{"rank": 1, "channel_id": "c/1", "count": 2}], [], 1), "only the change"
                changed_emoji = held_emoji.apply(event)
                assert changed_emoji["snapshot_id"] > first_emoji["snapshot_id"]
                assert items(changed_emoji) == [(1, "c/1", 2)]
                assert changed_emoji["window_end"] > first_emoji["window_end"]

                new_channel = live.append(("A", "w", "u1", T0 + 60_001))
                [(_, event)] = sse_events(a_lines, 1)  # not the emoji-only snapshot: A's top did not change
                changed_at = time.monotonic()
                assert (event["full"], event["changed"], event["removed"], event["size"]) == (
                    False, [{"rank": 3, "channel_id": "w", "count": 1}], [], 3), "only the change"
                changed = held_a.apply(event)
                assert items(changed) == [(1, "y", 2), (2, "x", 1), (3, "w", 1)]
                assert changed["snapshot_id"] >= new_channel["snapshot_id"] > only_emoji["snapshot_id"]
                assert (changed["window_start"], changed["window_end"], changed["watermark"]) == (
                    only_emoji["window_start"], only_emoji["window_end"], T0 + 60_001)
                assert is_the_route_answer(api, "/activity/A/top", held_a)

                # two changes in quick succession: at most one event a second, the newest state last
                live.append(("A", "z", "u1", T0 + 60_002))
                live.append(("A", "z", "u2", T0 + 60_003))
                newest = [(1, "z", 2), (2, "y", 2), (3, "x", 1), (4, "w", 1)]
                burst = held_a.apply(sse_events(a_lines, 1)[0][1])
                gaps = [time.monotonic() - changed_at]
                if items(burst) != newest:  # the first change came alone, a second or more after the last event
                    assert items(burst) == [(1, "y", 2), (2, "z", 1), (3, "x", 1), (4, "w", 1)]
                    at = time.monotonic()
                    burst = held_a.apply(sse_events(a_lines, 1)[0][1])
                    gaps.append(time.monotonic() - at)
                assert items(burst) == newest and held_a.is_answer(reader.top("A", 10))
                assert is_the_route_answer(api, "/activity/A/top", held_a)
                assert min(gaps) >= sse.STREAM_MIN_INTERVAL_S * 0.9, gaps
