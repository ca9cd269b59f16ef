"""Resuming an event stream (``api.sse.History``): a client that reconnects with ``Last-Event-ID``
(the snapshot id of the last event it got) gets first only what changed since that event (the
same diff for every product's stream, api.stream_diff), and a full first event when the id is
unknown; against real flows' snapshots in a real Redis."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
from fastapi.testclient import TestClient

from rankflow.api import sse, stream_diff
from rankflow.api.app import Settings, create_app
from tests import boards_example as example
from tests.api.test_api_activity import T0, live_activity
from tests.api.stream_client import HeldTop
from tests.api.test_api_boards import FAY_PLAYED, live_boards
from tests.events import ev
from tests.waiting import wait_for

LINES = [ev("u1", "p1", "song_a", "START", 1), ev("u2", "p2", "song_b", "START", 1),
         ev("u3", "p3", "song_b", "START", 1)]
MORE = LINES + [ev("u9", "p9", "song_b", "START", 1)]
EVEN_MORE = MORE + [ev("u8", "p8", "song_y", "START", 1), ev("u7", "p7", "song_y", "START", 1),
                    ev("u6", "p6", "song_y", "START", 1)]
UNKNOWN = "7"  # no snapshot id a flow makes (run token 0)


def next_event(lines: Iterator[str]) -> tuple[str, int, dict[str, Any]]:
    """The next event of a stream: its name, its SSE id and its data (comments skipped)."""
    name, event_id, data = "message", -1, None
    for text in lines:
        if text.startswith("event: "):
            name = text[7:]
        elif text.startswith("id: "):
            event_id = int(text[4:])
        elif text.startswith("data: "):
            data = orjson.loads(text[6:])
        elif text == "" and data is not None:
            return name, event_id, data
    raise AssertionError("the stream ended")


def first_event(api: TestClient, path: str, last_id: int | str | None = None) -> tuple[str, int, dict[str, Any]]:
    """The first event of a new connection to ``path`` (``Last-Event-ID: last_id`` if given)."""
    headers = {} if last_id is None else {"Last-Event-ID": str(last_id)}
    with api.stream("GET", path, headers=headers) as stream:
        return next_event(stream.iter_lines())


def revalidated(api: TestClient, path: str) -> tuple[str, int]:
    """A read's ``ETag``, and the status of the same read with ``If-None-Match`` of it."""
    tag = api.get(path).headers["etag"]
    return tag, api.get(path, headers={"If-None-Match": tag}).status_code


def test_the_history_keeps_the_last_snapshots_of_each_stream():
    history = sse.History(snapshots=3, streams=2)
    for sid in range(1, 6):
        history.record("a", sid, [sid])
    assert [history.at("a", sid) for sid in range(1, 6)] == [None, None, [3], [4], [5]]
    history.record("a", 2, ["again"])  # ids start over (Redis lost its data): what this id sent now
    assert history.at("a", 2) == ["again"] and history.at("a", 3) is None and history.at("a", 5) == [5]
    assert history.at("a", None) is None and history.at("b", 5) is None
    history.record("b", 1, "b")
    history.record("c", 1, "c")  # a third stream: the history starts over
    assert history.at("c", 1) == "c" and history.at("a", 5) is None


def test_the_listener_stream_resumes_with_the_changes_since_the_last_event(flow, redis_url, namespace):
    flow.run(flow.write_log(LINES, "a.jsonl"), namespace=namespace)
    with TestClient(create_app(Settings(redis_url=redis_url, namespace=namespace, poll_ms=20))) as api:
        wait_for(lambda: api.get("/rankings?k=3").status_code, lambda s: s == 200)
        _, first_id, first = first_event(api, "/rankings/stream?k=3")
        assert first["full"] is True and first_id == first["snapshot_id"]
        held = stream_diff.apply([], first)

        flow.run(flow.write_log(MORE, "b.jsonl"), namespace=namespace)  # song_b has one listener more
        now = wait_for(lambda: api.get("/rankings?k=3").json(), lambda r: r["snapshot_id"] != first_id)
        kind, resumed_id, resumed = first_event(api, "/rankings/stream?k=3", first_id)
        assert kind == "ranking" and resumed_id == now["snapshot_id"]
        assert resumed["full"] is False and resumed["removed"] == []
        assert resumed["changed"] == [{"rank": 1, "song_id": "song_b", "listeners": 3}], "only the change"
        held = stream_diff.apply(held, resumed)
        assert held == now["items"]

        _, _, unknown = first_event(api, "/rankings/stream?k=3", UNKNOWN)
        assert unknown["full"] is True and unknown["changed"] == now["items"]
        _, _, garbage = first_event(api, "/rankings/stream?k=3", "yesterday")
        assert garbage["full"] is True

        with api.stream("GET", "/rankings/stream?k=3", headers={"Last-Event-ID": str(resumed_id)}) as stream:
            lines = stream.iter_lines()  # the client holds the current top: nothing to send until it changes
            flow.run(flow.write_log(EVEN_MORE, "c.jsonl"), namespace=namespace)
            _, later_id, later = next_event(lines)
        assert later_id > resumed_id and later["full"] is False
        final = api.get("/rankings?k=3").json()
        assert stream_diff.apply(held, later) == final["items"] and later_id == final["snapshot_id"]


def test_a_board_stream_resumes_with_the_changes_since_the_last_event(redis_url, tmp_path):
    with live_boards(redis_url, tmp_path) as live:
        live.append(*example.LINES)
        settings = Settings(redis_url=redis_url, namespace=live.namespace, poll_ms=20)
        with TestClient(create_app(settings)) as api:
            _, first_id, first = first_event(api, "/boards/g1/all/stream")
            assert first_id == first["snapshot_id"] and first["full"] is True
            held = HeldTop()
            held.apply(first)
            # the top's validator (api.http_cache): a 304 until a new snapshot (unless one came in between)
            tag = wait_for(lambda: revalidated(api, "/boards/g1/all/top"), lambda pair: pair[1] == 304)[0]

            live.append(example.result("fay", "m9", 80, FAY_PLAYED, FAY_PLAYED + 1000))  # fay first
            top = wait_for(lambda: api.get("/boards/g1/all/top").json(), lambda t: t["items"][0]["player_id"] == "fay")
            newer = api.get("/boards/g1/all/top", headers={"If-None-Match": tag})
            assert newer.status_code == 200 and newer.headers["etag"] != tag
            kind, resumed_id, resumed = first_event(api, "/boards/g1/all/stream", first_id)
            assert kind == "board" and resumed_id > first_id and resumed["full"] is False
            assert resumed["removed"] == [] and resumed["size"] == len(top["items"])
            held.apply(resumed)
            # the top as of the event's snapshot or a later one (snapshots keep coming, the same top)
            now = api.get("/boards/g1/all/top").json()
            assert held.is_answer(now) and now["items"] == top["items"], (held.answer, now)
            _, _, unknown = first_event(api, "/boards/g1/all/stream", UNKNOWN)
            assert unknown["full"] is True and unknown["changed"] == top["items"]

            with api.stream("GET", "/boards/g1/all/stream", headers={"Last-Event-ID": str(resumed_id)}) as stream:
                lines = stream.iter_lines()  # it has this top: the first event is the next change
                live.append(example.result("gus", "m10", 90, FAY_PLAYED + 1, FAY_PLAYED + 2000))
                _, later_id, later = next_event(lines)
            assert later_id > resumed_id and later["full"] is False
            assert held.apply(later)["items"][0]["player_id"] == "gus"
            assert held.is_answer(api.get("/boards/g1/all/top").json())


def test_an_activity_stream_resumes_with_the_changes_since_the_last_event(redis_url, tmp_path):
    with live_activity(redis_url, tmp_path) as live:
        live.append(("A", "x", "u1", T0), ("A", "y", "u1", T0 + 1), ("A", "y", "u2", T0 + 2))
        settings = Settings(redis_url=redis_url, namespace=live.namespace, poll_ms=20)
        with TestClient(create_app(settings)) as api:
            _, first_id, first = first_event(api, "/activity/A/stream")
            held = HeldTop()
            held.apply(first)
            tag = api.get("/activity/A/top").headers["etag"]
            live.append(("A", "w", "u1", T0 + 3))  # a channel more in A's top
            top = wait_for(lambda: api.get("/activity/A/top").json(), lambda t: len(t["items"]) == 3)
            newer = api.get("/activity/A/top", headers={"If-None-Match": tag})
            assert newer.status_code == 200 and newer.headers["etag"] != tag  # a new snapshot: a new tag
            _, resumed_id, resumed = first_event(api, "/activity/A/stream", first_id)
            assert resumed_id > first_id and resumed["full"] is False
            assert resumed["changed"] == [{"rank": 3, "channel_id": "w", "count": 1}], "only the change"
            held.apply(resumed)
            # the top as of the event's snapshot or a later one (snapshots keep coming, the same top)
            now = api.get("/activity/A/top").json()
            assert held.is_answer(now) and now["items"] == top["items"], (held.answer, now)
            _, _, unknown = first_event(api, "/activity/A/stream", UNKNOWN)
            assert unknown["full"] is True and unknown["changed"] == top["items"]

            with api.stream("GET", "/activity/A/stream", headers={"Last-Event-ID": str(resumed_id)}) as stream:
                lines = stream.iter_lines()
                live.append(("B", "q", "u1", T0 + 4))  # snapshots that leave A's top as it is: nothing sent
                live.append(("A", "v", "u1", T0 + 5))
                _, later_id, later = next_event(lines)
            assert later_id > resumed_id and later["full"] is False
            assert [i["channel_id"] for i in held.apply(later)["items"]].count("v") == 1
            assert held.is_answer(api.get("/activity/A/top").json())
