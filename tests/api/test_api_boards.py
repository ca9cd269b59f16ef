"""The score boards over HTTP against boards the real flow published into a real Redis.

The flow runs on the worked example of docs/semantics/boards.md section 8 (``tests/boards_example.py``);
every endpoint is checked against the boards that section lists: ranks, competition
ranks, around at both ends, aliases, 404s, 400s. The stream test follows a growing
log, one published snapshot per appended line. Every test runs against both board
indexes (``--board-index redis`` and ``memory``): the same answers, to the byte.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
import pytest
import redis
from fastapi.testclient import TestClient

from rankflow.api.app import Settings, create_app
from rankflow.connectors.redis_keys import boards_namespace
from rankflow.connectors.redis_read import read_latest
from rankflow.connectors.source_batch import STOP
from rankflow.options import RunOptions
from rankflow.runner import run
from tests import boards_example as example, boards_model as model
from tests.api.raw_http import Connection, served
from tests.api.stream_client import HeldTop
from tests.snapshot_stamp import ageless, ageless_response, stamped, stored_published_at

ALL_PLAYERS = ["ana", "bo", "cy", "dee", "eve"]


@pytest.fixture(scope="module")
def published(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The worked example, published once for the module's tests (they only read)."""
    tmp = tmp_path_factory.mktemp("boards-api")
    path = tmp / "scores.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in example.LINES))
    namespace = f"b-{uuid.uuid4().hex[:10]}"
    final = run(RunOptions(input=f"jsonl:{path}", until_eof=True, redis_url=redis_url, namespace=namespace,
                           dead_letter=f"jsonl:{tmp / 'dead.jsonl'}", flow="boards", signing_key=example.KEY))
    assert final is not None
    published_at = stored_published_at(redis.Redis.from_url(redis_url), boards_namespace(namespace))
    return {"namespace": namespace, "snapshot_id": final["snapshot_id"], "published_at": published_at}


INDEXES = ["redis", "memory"]


@contextmanager
def serving(settings: Settings, app: Any = None) -> Iterator[TestClient]:
    """The app on ``settings`` (or ``app``, made from them); with ``--board-index memory`` once
    its mirror serves (before that it answers from Redis, which would prove nothing about the mirror)."""
    with TestClient(app if app is not None else create_app(settings)) as client:
        mirror = client.app.state.board_mirror
        deadline = time.monotonic() + 10
        while mirror is not None and not mirror.ready:
            assert time.monotonic() < deadline, f"the mirror never loaded: {mirror.problem}"
            time.sleep(0.01)
        yield client


@pytest.fixture(scope="module", params=INDEXES)
def api(request: pytest.FixtureRequest, redis_url: str, published: dict[str, Any]) -> Iterator[TestClient]:
    with serving(Settings(redis_url=redis_url, namespace=published["namespace"], board_index=request.param)) as c:
        yield c


def rows(items: list[dict[str, Any]]) -> list[tuple[str, int, int, int]]:
    return [(i["player_id"], i["score"], i["rank"], i["competition_rank"]) for i in items]


def test_top_of_every_board_is_the_worked_example(api, published):
    for board, expected in example.BOARDS.items():
        r = api.get(f"/boards/g1/{board}/top", params={"n": 1000})
        assert r.status_code == 200, r.text
        body = r.json()
        assert list(body)[:3] == ["snapshot_id", "published_at", "age_ms"]
        assert stamped(body, published["published_at"]) == {
            "snapshot_id": published["snapshot_id"], "published_at": published["published_at"], "game_id": "g1",
            "board": board, "total_players": len(expected), "items": body["items"]}
        assert rows(body["items"]) == expected
        for item in body["items"]:
            assert list(item) == ["rank", "competition_rank", "player_id", "score"]


def test_top_n_defaults_to_10_and_cuts_the_list(api):
    assert rows(api.get("/boards/g1/all/top").json()["items"]) == example.BOARDS["all"]
    body = api.get("/boards/g1/best/top", params={"n": 2}).json()
    assert body["total_players"] == 5 and rows(body["items"]) == example.BOARDS["best"][:2]
    assert rows(api.get("/boards/g1/all/top", params={"n": 1}).json()["items"]) == [("ana", 50, 1, 1)]


def test_every_player_on_every_board(api, published):
    for board, expected in example.BOARDS.items():
        for player, score, rank, competition in expected:
            r = api.get(f"/boards/g1/{board}/players/{player}")
            assert r.status_code == 200, r.text
            body = r.json()
            assert body.pop("percentile") == model.percentile(rank, len(expected))  # boards.md 5.2
            assert stamped(body, published["published_at"]) == {
                "snapshot_id": published["snapshot_id"], "published_at": published["published_at"], "game_id": "g1",
                "board": board, "player_id": player, "score": score, "rank": rank, "competition_rank": competition}


def test_aliases_answer_for_the_concrete_board(api):
    for alias, board in example.ALIASES.items():
        top = api.get(f"/boards/g1/{alias}/top").json()
        assert top["board"] == board and rows(top["items"]) == example.BOARDS[board]
        assert api.get(f"/boards/g1/{alias}/players/eve").json()["board"] == board
        assert api.get(f"/boards/g1/{alias}/players/eve/around").json()["board"] == board
    r = api.get("/boards/g1/daily/players/ana")
    assert r.status_code == 404 and r.json()["error"] == "ana is not on g1/daily:2027-01-04"


def test_around_a_player_clamps_at_both_ends(api, published):
    def around(board: str, player: str, r: int | None = None) -> list[tuple[str, int, int, int]]:
        response = api.get(f"/boards/g1/{board}/players/{player}/around", params={} if r is None else {"r": r})
        assert response.status_code == 200, response.text
        body = stamped(response.json(), published["published_at"])
        assert (body["snapshot_id"], body["game_id"], body["board"]) == (published["snapshot_id"], "g1", board)
        return rows(body["items"])

    all_rows = example.BOARDS["all"]
    assert around("all", "eve", 1) == all_rows[3:5], "rank 6 does not exist (section 8)"
    assert around("all", "ana", 1) == all_rows[0:2], "rank 0 does not exist"
    assert around("all", "cy", 1) == all_rows[1:4]
    assert around("all", "cy", 0) == all_rows[2:3]
    assert around("all", "dee") == all_rows, "r defaults to 5"
    assert around("best", "bo", 50) == example.BOARDS["best"]
    assert around("daily:2027-01-02", "bo", 1) == example.BOARDS["daily:2027-01-02"]


G1_BOARDS = ("all, best, daily:2027-01-04 (daily), daily:2027-01-03, daily:2027-01-02, weekly:2027-W01 (weekly), "
             "weekly:2026-W53")
"""The boards of g1 as a "no such board" answer lists them."""


def test_missing_boards_and_players_are_404(api):
    """A board or game that does not exist is named, with the ones that do: a misspelt name shows the right one."""
    for path, error in [
        ("/boards/g1/daily:2027-01-03/players/ana", "ana is not on g1/daily:2027-01-03"),
        ("/boards/g1/all/players/zed/around", "zed is not on g1/all"),
        ("/boards/g1/daily:2027-01-05/top", f"no board 'daily:2027-01-05' in game 'g1'; its boards: {G1_BOARDS}"),
        ("/boards/g2/all/top", "no game 'g2'; games: g1"),
        ("/boards/g2/daily/top", "no game 'g2'; games: g1"),
        ("/boards/g2/weekly/players/ana", "no game 'g2'; games: g1"),
        ("/boards/g2/best/players/ana/around", "no game 'g2'; games: g1"),
        ("/boards/g2/all/stream", "no game 'g2'; games: g1"),
    ]:
        r = api.get(path)
        assert (r.status_code, r.json()) == (404, {"error": error}), path


SLASHED_GAME = "league/eu"  # docs/semantics/boards.md allows any characters in an id, "/" too


@pytest.fixture(scope="module")
def slashed(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A game id and player ids holding ``/`` (one holds ``/players/``, one is ``top``), published."""
    tmp = tmp_path_factory.mktemp("boards-slashed")
    at = example.ms("2027-01-02 10:00:00.000")
    lines = [example.result(player, f"m{i}", points, at + i, at + i + 1000, game=SLASHED_GAME)
             for i, (player, points) in enumerate([("a/players/b", 30), ("top", 20), ("c", 10)])]
    return example.publish_boards(redis_url, tmp, lines)


@pytest.mark.parametrize("index", INDEXES)
def test_ids_holding_slashes_are_addressable(redis_url, slashed, index):
    with serving(Settings(redis_url=redis_url, namespace=slashed, board_index=index)) as api:
        for game in (SLASHED_GAME, quote(SLASHED_GAME, safe="")):  # as is, or as %2F
            top = api.get(f"/boards/{game}/all/top")
            assert top.status_code == 200, top.text
            assert [(i["player_id"], i["rank"]) for i in top.json()["items"]] == [("a/players/b", 1), ("top", 2), ("c", 3)]
            assert top.json()["game_id"] == SLASHED_GAME
            for player, rank in [("a/players/b", 1), ("top", 2)]:
                r = api.get(f"/boards/{game}/best/players/{player}")
                assert (r.status_code, r.json().get("rank"), r.json().get("game_id")) == (200, rank, SLASHED_GAME), r.text
            around = api.get(f"/boards/{game}/all/players/top/around", params={"r": 1})
            assert [i["player_id"] for i in around.json()["items"]] == ["a/players/b", "top", "c"], around.text
        assert api.get("/boards/league/all/top").json() == {"error": "no game 'league'; games: league/eu"}


def test_usage_errors_are_400_never_clamped(api):
    for path, params, error in [
        ("/boards/g1/all/top", {"n": 0}, "n must be between 1 and 1000, got 0"),
        ("/boards/g1/all/top", {"n": 1001}, "n must be between 1 and 1000, got 1001"),
        ("/boards/g1/all/top", {"n": "ten"}, "n: "),
        ("/boards/g1/all/players/eve/around", {"r": -1}, "r must be between 0 and 50, got -1"),
        ("/boards/g1/all/players/eve/around", {"r": 51}, "r must be between 0 and 50, got 51"),
        ("/boards/g1/all/players/eve/around", {"r": 1.5}, "r: "),
        ("/boards/g1/monthly/top", {}, "unknown board 'monthly'"),
        ("/boards/g1/daily:2027-1-4/players/eve", {}, "unknown board 'daily:2027-1-4'"),
        ("/boards/g1/All/stream", {}, "unknown board 'All'"),
        ("/boards/g2/monthly/top", {}, "unknown board 'monthly'"),  # a usage error before any lookup
    ]:
        r = api.get(path, params=params)
        assert r.status_code == 400 and r.json()["error"].startswith(error), (path, params, r.text)


def test_the_list_of_games_boards_and_aliases(api, published):
    assert api.get("/boards").json() == {"snapshot_id": published["snapshot_id"], "games": {"g1": {
        "boards": ["all", "best", "daily:2027-01-04", "daily:2027-01-03", "daily:2027-01-02", "weekly:2027-W01",
                   "weekly:2026-W53"],
        "aliases": {"daily": "daily:2027-01-04", "weekly": "weekly:2027-W01"}}}}


@pytest.mark.parametrize("index", INDEXES)
def test_an_empty_namespace_has_no_usable_snapshot(redis_url, index):
    """Nothing published: no board is known not to exist, so every board route is a 503 (as
    ``/rankings`` before the first ranking), never "no such board"; a usage error stays a 400."""
    namespace = f"e-{uuid.uuid4().hex[:8]}"
    with serving(Settings(redis_url=redis_url, namespace=namespace, board_index=index)) as client:
        unusable = {"error": f"no usable boards snapshot in namespace {boards_namespace(namespace)!r}: nothing "
                             "published yet, or Redis lost its data"}
        for path in ("/boards", "/boards/g1/all/top", "/boards/g1/daily/players/ana",
                     "/boards/g1/all/players/ana/around", "/boards/g1/weekly/stream"):
            r = client.get(path)
            assert (r.status_code, r.json()) == (503, unusable), path
        assert client.get("/boards/g1/monthly/top").status_code == 400


@pytest.mark.parametrize("index", INDEXES)
def test_unreachable_redis_is_a_503(index):
    from rankflow.services import free_port

    with TestClient(create_app(Settings(redis_url=f"redis://127.0.0.1:{free_port()}/0", board_index=index))) as client:
        for path in ("/boards", "/boards/g1/all/top", "/boards/g1/all/players/ana", "/boards/g1/all/stream"):
            r = client.get(path)
            assert r.status_code == 503 and "cannot read the boards" in r.json()["error"], path


def test_openapi_lists_the_board_routes(api):
    paths = api.get("/openapi.json").json()["paths"]
    for path in ("/boards", "/boards/{game}/{board}/top", "/boards/{game}/{board}/players/{player_id}",
                 "/boards/{game}/{board}/players/{player_id}/around", "/boards/{game}/{board}/stream"):
        assert path in paths, path
    for path in ("/boards/{game}/{board}/top", "/boards/{game}/{board}/players/{player_id}",
                 "/boards/{game}/{board}/players/{player_id}/around", "/boards/{game}/{board}/stream"):
        cached = set() if path.endswith("/stream") else {"304"}  # If-None-Match on the reads (api.openapi_cache)
        since = set() if path.endswith("/stream") else {"409"}  # a since not retained (semantics/boards.md 5.6)
        assert set(paths[path]["get"]["responses"]) == {"200", "400", "404", "503"} | cached | since, path  # never 422


# -- the stream, on a flow that follows a growing log -----------------------------------------

class LiveBoards:
    """The boards flow following a file: :meth:`append` returns once the line is published."""

    def __init__(self, redis_url: str, tmp: Path) -> None:
        self.path = tmp / "live-scores.jsonl"
        self.path.write_bytes(b"")
        self.namespace = f"b-{uuid.uuid4().hex[:10]}"
        self.client = redis.Redis.from_url(redis_url)
        self.lines = 0
        self.failure: list[BaseException] = []
        opts = RunOptions(input=f"jsonl:{self.path}", redis_url=redis_url, namespace=self.namespace, flow="boards",
                          dead_letter=f"jsonl:{tmp / 'live-dead.jsonl'}", signing_key=example.KEY)
        self.thread = threading.Thread(target=self._run, args=(opts,), name="boards-flow")

    def _run(self, opts: RunOptions) -> None:
        try:
            run(opts)
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            self.failure.append(exc)

    def append(self, *lines: bytes) -> None:
        with open(self.path, "ab") as out:
            out.write(b"".join(line + b"\n" for line in lines))
        self.lines += len(lines)
        deadline = time.monotonic() + 60
        while (snap := read_latest(self.client, boards_namespace(self.namespace))) is None \
                or snap["positions"][str(self.path)] < self.lines:
            assert not self.failure and time.monotonic() < deadline, f"never published: {self.failure}"
            time.sleep(0.005)


@contextmanager
def live_boards(redis_url: str, tmp: Path) -> Iterator[LiveBoards]:
    live = LiveBoards(redis_url, tmp)
    live.thread.start()
    try:
        yield live
    finally:
        STOP.set()
        live.thread.join(timeout=60)
        live.client.close()
    assert not live.failure, live.failure


def sse_events(lines: Iterator[str], n: int) -> list[tuple[str, dict[str, Any]]]:
    """The next ``n`` events of a stream as ``(event name, data)``, skipping comments."""
    out: list[tuple[str, dict[str, Any]]] = []
    name, data = "message", None
    for line in lines:
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            data = orjson.loads(line[6:])
        elif line == "" and data is not None:
            out.append((name, data))
            name, data = "message", None
            if len(out) == n:
                break
    return out


def until(lines: Iterator[str], held: HeldTop, done: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The top ``held`` rebuilds from the ``board`` events until it is ``done``, and the last
    event; there may be one event before it, no more."""
    for _ in range(2):
        [(kind, event)] = sse_events(lines, 1)
        assert kind == "board", event
        if done(top := held.apply(event)):
            return top, event
    raise AssertionError(f"the stream never showed it; last: {top}")


def is_the_route_answer(api: TestClient, path: str, held: HeldTop) -> None:
    """The top ``held`` rebuilt is what ``path``'s JSON answers (of the same snapshot, or of a later one saying the same)."""
    answer = api.get(path).json()
    assert held.is_answer(answer), (held.answer, answer)


FAY_PLAYED = example.ms("2027-01-13 10:00:00.000")


@pytest.mark.parametrize("index", INDEXES)
def test_streams_follow_new_snapshots_aliases_and_dropped_boards(redis_url, tmp_path, index):
    """One line makes fay first on ``all``, moves ``daily`` nine days on (a new board),
    and so drops ``daily:2027-01-04`` (docs/semantics/boards.md 7: 8 daily periods are kept)."""
    with live_boards(redis_url, tmp_path) as live:
        live.append(*example.LINES)
        settings = Settings(redis_url=redis_url, namespace=live.namespace, poll_ms=20, board_index=index)
        with serving(settings) as api:
            with api.stream("GET", "/boards/g1/all/stream") as all_stream, \
                    api.stream("GET", "/boards/g1/daily/stream") as daily_stream, \
                    api.stream("GET", "/boards/g1/daily:2027-01-04/stream") as dropped_stream:
                assert all_stream.headers["content-type"].startswith("text/event-stream")
                all_lines, daily_lines = all_stream.iter_lines(), daily_stream.iter_lines()
                dropped_lines = dropped_stream.iter_lines()
                held_all, held_daily, held_dropped = HeldTop(), HeldTop(), HeldTop()
                [(kind, event)] = sse_events(all_lines, 1)
                assert kind == "board" and event["full"] is True and event["removed"] == []
                first = held_all.apply(event)
                assert rows(first["items"]) == example.BOARDS["all"] and event["size"] == len(first["items"])
                assert (first["game_id"], first["board"], first["total_players"]) == ("g1", "all", 5)
                is_the_route_answer(api, "/boards/g1/all/top?n=10", held_all)
                first_daily = held_daily.apply(sse_events(daily_lines, 1)[0][1])
                assert first_daily["board"] == "daily:2027-01-04"
                assert rows(first_daily["items"]) == example.BOARDS["daily:2027-01-04"]
                is_the_route_answer(api, "/boards/g1/daily/top?n=10", held_daily)
                assert held_dropped.apply(sse_events(dropped_lines, 1)[0][1])["board"] == "daily:2027-01-04"

                live.append(example.result("fay", "m9", 80, FAY_PLAYED, FAY_PLAYED + 1000),
                            example.result("clan/zoe", "m9", 70, FAY_PLAYED, FAY_PLAYED + 1000),
                            example.result("🎮 é|1:x?#%", "m9", 0, FAY_PLAYED, FAY_PLAYED + 1000, game="g/2"))
                # the three lines may land in one snapshot or two: a stream may show fay alone first
                changed, event = until(all_lines, held_all, lambda top: len(top["items"]) == 7)
                assert changed["snapshot_id"] > first["snapshot_id"] and changed["total_players"] == 7
                assert rows(changed["items"]) == [("fay", 80, 1, 1), ("clan/zoe", 70, 2, 2)] + [
                    (p, s, r + 2, c + 2) for p, s, r, c in example.BOARDS["all"]]
                assert event["full"] is False and event["removed"] == [] and event["size"] == 7
                is_the_route_answer(api, "/boards/g1/all/top?n=10", held_all)
                moved, event = until(daily_lines, held_daily, lambda top: len(top["items"]) == 2)
                assert moved["board"] == "daily:2027-01-13" and event["full"] is True  # another board: whole
                assert rows(moved["items"]) == [("fay", 80, 1, 1), ("clan/zoe", 70, 2, 2)]
                is_the_route_answer(api, "/boards/g1/daily/top?n=10", held_daily)
                [(event, gone)] = sse_events(dropped_lines, 1)
                assert event == "gone" and gone["error"].startswith("no board 'daily:2027-01-04' in game 'g1'; its "
                                                                    "boards: all, best, daily:2027-01-13 (daily)"), gone

            # a player id holding "/" is the rest of the path; any other character is percent-encoded
            assert api.get("/boards/g1/daily/players/clan/zoe").json()["rank"] == 2
            assert api.get("/boards/g1/daily/players/clan%2Fzoe").json()["rank"] == 2
            odd = "/boards/g1/all/players/" + quote("🎮 é|1:x?#%")
            assert api.get(odd).json()["error"] == "🎮 é|1:x?#% is not on g1/all"
            assert api.get("/boards").json()["games"]["g/2"]["boards"] == ["all", "best", "daily:2027-01-13",
                                                                           "weekly:2027-W02"]
            assert [i["player_id"] for i in api.get("/boards/g1/all/players/clan/zoe/around",
                                                    params={"r": 1}).json()["items"]] == ["fay", "clan/zoe", "ana"]
            assert api.get("/boards/g1/daily:2027-01-04/top").status_code == 404


def test_health_of_a_boards_only_deployment(api, published):
    """No listener ranking in the namespace: the service is healthy with the boards' snapshot."""
    deadline = time.monotonic() + 10
    while (body := api.get("/health").json())["boards_snapshot_id"] is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert body["status"] == "ok" and body["snapshot_id"] is None
    assert body["boards_snapshot_id"] == published["snapshot_id"]
    index = api.app.state.settings.board_index
    assert body["board_index"] == index
    if index == "memory":  # the fixture waits until the mirror serves
        assert body["board_mirror"] == {"ready": True, "problem": None, "snapshot_id": published["snapshot_id"]}
    else:
        assert "board_mirror" not in body


# -- the hot reads' lean path (api.hot_reads) answers as FastAPI does, to the byte ----------

@contextmanager
def without_hot_reads(settings: Settings) -> Iterator[TestClient]:
    """The app on ``settings`` with every request answered by FastAPI (no ``HotReads``)."""
    from rankflow.api.hot_reads import HotReads

    app = create_app(settings)
    app.user_middleware = [m for m in app.user_middleware if m.cls is not HotReads]
    with serving(settings, app) as client:
        yield client


HOT_PATHS = [
    "/boards/g1/all/top", "/boards/g1/all/top?n=1", "/boards/g1/best/top?n=100", "/boards/g1/all/top?n=0100",
    "/boards/g1/daily/top?n=3", "/boards/g1/weekly/top", "/boards/g1/daily:2027-01-03/top?n=2",
    "/boards/g1/all/top?n=0", "/boards/g1/all/top?n=1001", "/boards/g1/all/top?n=ten", "/boards/g1/all/top?n=",
    "/boards/g1/all/top?n=5&n=6", "/boards/g1/monthly/top", "/boards/g2/all/top", "/boards/g1/all/top/",
    "/boards/g1/daily:2027-01-05/top", "/boards/g1/players/top",
    *(f"/boards/g1/{board}/players/{player}" for board in ("all", "best", "daily", "weekly")
      for player in (*ALL_PLAYERS, "zed")),
    "/boards/g1/monthly/players/ana", "/boards/g2/all/players/ana", "/boards/g1/all/players/ana?x=1",
    "/boards/g1/all/players/around", "/boards/g1/all/players/ana/around", "/boards/g1/all/players/ana/around?r=1",
    "/boards/g1/all/players/ana/around?r=51", "/boards/g1/all/players/zed/around", "/boards",
]


NEVER_STALE_MS = 24 * 3600 * 1000
"""``--stale-after-ms`` of the tests that compare two paths' answers: the example's snapshot is
published once per module, so with the default (10 s) its age may cross the threshold between
the two requests of a pair on a loaded machine, and the pair then differs in ``stale`` only."""


def same_answers(fast: TestClient, full: TestClient, paths: list[str]) -> None:
    """Each path's answer from both servers, byte for byte but for the age. A live flow may
    publish between the two requests: a pair from two snapshots is asked again (until a
    deadline), never compared."""
    for path in paths:
        deadline = time.monotonic() + 30
        while True:
            a, b = fast.get(path), full.get(path)
            if a.headers.get("etag", "").split("-")[0] == b.headers.get("etag", "").split("-")[0]:
                break  # the same snapshot (or neither names one)
            assert time.monotonic() < deadline, f"{path}: the two servers never answered from one snapshot"
        assert (ageless_response(a.status_code, list(a.headers.items()), a.content)
                == ageless_response(b.status_code, list(b.headers.items()), b.content)), path


@pytest.mark.parametrize("index", INDEXES)
def test_the_lean_path_answers_byte_for_byte_as_fastapi(redis_url, published, index):
    settings = Settings(redis_url=redis_url, namespace=published["namespace"], board_index=index,
                        stale_after_ms=NEVER_STALE_MS)
    with serving(settings) as fast, without_hot_reads(settings) as full:
        same_answers(fast, full, HOT_PATHS)
        same_answers(fast, full, HOT_PATHS)  # again: from the per-snapshot cache
        assert fast.app.state.hot_answers >= 2 * 20 and full.app.state.hot_answers == 0
        metrics = fast.get("/metrics").text
        assert 'route="/boards/{game:game}/{board}/top",status="200"' in metrics


@pytest.mark.parametrize("index", INDEXES)
def test_a_new_snapshot_replaces_the_cached_top(redis_url, tmp_path, index):
    with live_boards(redis_url, tmp_path) as live:
        live.append(*example.LINES)
        settings = Settings(redis_url=redis_url, namespace=live.namespace, poll_ms=20, board_index=index,
                            stale_after_ms=NEVER_STALE_MS)
        with serving(settings) as fast, without_hot_reads(settings) as full:
            first = fast.get("/boards/g1/all/top?n=100").json()
            assert rows(first["items"]) == example.BOARDS["all"]
            live.append(example.result("fay", "m9", 80, FAY_PLAYED, FAY_PLAYED + 1000))
            deadline = time.monotonic() + 30
            while rows((now := fast.get("/boards/g1/all/top?n=100").json())["items"])[0] != ("fay", 80, 1, 1):
                assert time.monotonic() < deadline, "the cached top never showed the new snapshot"
                time.sleep(0.01)
            assert now["snapshot_id"] > first["snapshot_id"]
            while full.get("/boards/g1/all/top?n=100").json()["snapshot_id"] != now["snapshot_id"]:
                assert time.monotonic() < deadline, "the full path never saw the snapshot"
                time.sleep(0.01)
            same_answers(fast, full, ["/boards/g1/all/top?n=100", "/boards/g1/all/players/fay"])


# -- prepared answers (api.prepared): the server's protocol writes them, to the byte ---------

def _metric(text: str, route: str) -> float:
    line = next((x for x in text.splitlines()
                 if x.startswith("rankflow_api_requests_total{") and f'route="{route}",status="200"' in x), None)
    return 0.0 if line is None else float(line.rsplit(" ", 1)[1])


def _prepared_metric(text: str, route: str) -> float:
    """``rankflow_api_prepared_answers_total`` of ``route``: its answers the protocol wrote itself."""
    line = next(x for x in text.splitlines() if x.startswith(f'rankflow_api_prepared_answers_total{{route="{route}"}}'))
    return float(line.rsplit(" ", 1)[1])


@contextmanager
def two_servers(settings: Settings) -> Iterator[tuple[Any, int, int]]:
    """The app served twice by ``rankflow serve``'s server: with its prepared answers, and with none
    (every request through ASGI); once the mirror serves, with ``--board-index memory``."""
    fast, full = create_app(settings), create_app(settings)
    full.state.prepared = None
    with served(fast) as fast_port, served(full) as full_port:
        for app in (fast, full):  # the watcher knows the snapshot (the tops are shared per version), the mirror serves
            watched = app.state.board_changes
            deadline = time.monotonic() + 10
            while watched.version is None:
                assert time.monotonic() < deadline, f"the boards were never seen: {watched.problem}"
                time.sleep(0.01)
        yield fast, fast_port, full_port


@pytest.mark.parametrize("index", INDEXES)
def test_prepared_answers_are_the_bytes_of_the_asgi_path(redis_url, published, index):
    settings = Settings(redis_url=redis_url, namespace=published["namespace"], board_index=index,
                        stale_after_ms=NEVER_STALE_MS)
    with two_servers(settings) as (app, fast_port, full_port):
        fast, full = Connection(fast_port), Connection(full_port)
        for _ in range(2):  # the second time the tops are encoded: the protocol answers them
            for path in HOT_PATHS:
                assert fast.get(path)[0].comparable() == full.get(path)[0].comparable(), path
        players = 4 * len(ALL_PLAYERS) if index == "memory" else 0
        assert app.state.prepared.answered >= 7 + players
        # pipelined: one write, a request the protocol answers behind one ASGI answers, in order
        burst = ["/boards/g1/all/top", "/boards", "/boards/g1/all/top?n=1", "/boards/g1/all/players/zed",
                 f"/boards/g1/best/players/{ALL_PLAYERS[0]}", "/boards/g1/all/top"]
        assert [r.comparable() for r in fast.get(*burst)] == [r.comparable() for r in full.get(*burst)]
        fast.close()
        full.close()


def test_prepared_answers_are_counted_under_their_route(redis_url, published):
    settings = Settings(redis_url=redis_url, namespace=published["namespace"])
    with two_servers(settings) as (app, port, _):
        conn = Connection(port)
        conn.get("/boards/g1/all/top")  # encodes it for this snapshot
        metrics = conn.get("/metrics")[0].body.decode()
        before, answered = app.state.prepared.answered, _metric(metrics, TOP_ROUTE)
        by_protocol = _prepared_metric(metrics, TOP_ROUTE)
        assert [r.status for r in conn.get(*["/boards/g1/all/top"] * 5)] == [200] * 5
        assert app.state.prepared.answered == before + 5
        metrics = conn.get("/metrics")[0].body.decode()
        assert _metric(metrics, TOP_ROUTE) == answered + 5
        assert _prepared_metric(metrics, TOP_ROUTE) == by_protocol + 5, "counted apart as the protocol's own"
        conn.close()


TOP_ROUTE = "/boards/{game:game}/{board}/top"


# -- no usable boards snapshot: Redis lost its data, a restarted run publishes again ---------

@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[str]:
    """A Redis of the test's own: its FLUSHALL takes no other test's data."""
    from rankflow.services import LocalRedis, free_port

    service = LocalRedis(free_port(), tmp_path / "redis").start()
    yield service.url
    service.stop()


GAP_ROUTES = ["/boards/g1/all/top", "/boards/g1/daily/top?n=2", "/boards/g1/best/players/bo",
              "/boards/g1/weekly/players/cy", "/boards/g1/all/players/ana/around?r=1", "/boards"]
"""Tops, player ranks, arounds (aliases too) and the list: the routes a lost snapshot makes 503s."""


def get_until(api: TestClient, path: str, done: Any, timeout: float = 30.0) -> Any:
    """The first answer to ``GET path`` that ``done`` accepts (the service follows Redis by itself)."""
    deadline = time.monotonic() + timeout
    while not done(r := api.get(path)):
        assert time.monotonic() < deadline, f"{path}: still {r.status_code} {r.text}"
    return r


def without_id(body: dict[str, Any]) -> dict[str, Any]:
    """An answer but for its snapshot id and publication (a run restarted after Redis lost its data
    numbers anew, and publishes later)."""
    return {key: value for key, value in body.items() if key not in ("snapshot_id", "published_at", "age_ms")}


@pytest.mark.redis  # its own Redis besides the session's (tests/markers.py)
@pytest.mark.parametrize("index", INDEXES)
def test_no_usable_snapshot_is_a_503_until_a_restarted_run_publishes_every_board(own_redis, tmp_path, index):
    """Redis loses its data (FLUSHALL) while the boards run is down: the board routes answer what
    the listener routes answer without a ranking, ``503 {"error": "no usable ..."}`` (with
    ``--board-index memory`` also the last answer this process had, marked stale), never "no such
    board". The run restarted on its --recovery-dir publishes every board again in its first
    snapshot: from then on the same answers as before, and never a 404 on the way. A board no
    usable snapshot ever had is a 404 before and after."""
    path = tmp_path / "scores.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in example.LINES))
    namespace = f"b-{uuid.uuid4().hex[:10]}"
    opts = RunOptions(input=f"jsonl:{path}", until_eof=True, redis_url=own_redis, namespace=namespace, flow="boards",
                      dead_letter=f"jsonl:{tmp_path / 'dead.jsonl'}", signing_key=example.KEY, user_shards=2,
                      recovery_dir=str(tmp_path / "recovery"))
    assert run(opts)
    missing = (404, {"error": "no game 'g2'; games: g1"})
    unusable = f"no usable boards snapshot in namespace {boards_namespace(namespace)!r}: nothing published yet, " \
               "or Redis lost its data"
    settings = Settings(redis_url=own_redis, namespace=namespace, poll_ms=20, board_index=index)
    with serving(settings) as api, redis.Redis.from_url(own_redis) as client:
        before = {p: api.get(p) for p in GAP_ROUTES}
        assert all(r.status_code == 200 for r in before.values()), {p: r.text for p, r in before.items()}
        assert ((r := api.get("/boards/g2/all/top")).status_code, r.json()) == missing

        client.flushall()  # Redis lost its data
        for p in GAP_ROUTES:
            body = get_until(api, p, lambda r: r.status_code == 503).json()
            last = {**before[p].json(), "stale": True} if index == "memory" else {}  # the last answer it had
            assert ageless(body) == ageless({"error": unusable, **last}), p  # its snapshot's published_at too
        for p in ("/boards/g2/all/top", "/boards/g1/daily:2027-01-09/players/ana", "/boards/g1/all/players/zed"):
            r = api.get(p)  # nothing is known not to exist
            assert (r.status_code, r.json()) == (503, {"error": unusable}), p
        r = api.get("/boards/g1/all/stream")  # as its top (memory: with the last one, stale)
        assert (r.status_code, r.json()["error"]) == (503, unusable)
        assert api.get("/boards/g1/monthly/top").status_code == 400  # a usage error stays one
        health = api.get("/health").json()
        assert health["boards_snapshot_id"] is None
        if index == "memory":
            assert health["board_mirror"]["problem"] == unusable and health["board_mirror"]["snapshot_id"] is None

        restarted = threading.Thread(target=run, args=(opts,), name="boards-restarted")
        restarted.start()  # Redis has none of its boards: it publishes every one again
        try:
            deadline = time.monotonic() + 60
            back = False
            while not back:  # until the run ended and every route answers again
                assert time.monotonic() < deadline, "the boards never came back"
                done = not restarted.is_alive()
                answers = [(p, api.get(p)) for p in GAP_ROUTES]
                bad = [(p, r.status_code, r.text) for p, r in answers if r.status_code not in (200, 503)]
                assert not bad, bad  # never "no such board" on the way back
                back = done and all(r.status_code == 200 for _, r in answers)
        finally:
            restarted.join(timeout=60)
        for p, r in answers:
            assert without_id(r.json()) == without_id(before[p].json()), p
        assert ((r := api.get("/boards/g2/all/top")).status_code, r.json()) == missing
