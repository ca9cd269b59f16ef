"""``rank_change`` over HTTP (docs/semantics/boards.md 5.5): the routes answer what the Redis reader does.

A durable boards run with ``--rank-change`` publishes two executions (ana passes bo, cy is new);
both board indexes then answer every entry of a top (the shared one and a styled one), a page
and an around, and a player's rank, with the rank changes the reader the CLI uses gives: the
in-process mirror steps aside for Redis while the boards keep their moves. The OpenAPI names the
field. The model check over random logs is ``tests/boards/test_rank_change.py``.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from rankflow.api.app import Settings
from rankflow.connectors.board_read import BoardReader
from rankflow.options import RunOptions
from rankflow.runner import run
from tests import boards_example as example
from tests.api.test_api_boards import INDEXES, serving
from tests.snapshot_stamp import unjudged

DAY = "2027-01-04"


def result(player: str, match: str, points: int, hour: int) -> bytes:
    at = example.ms(f"{DAY} {hour:02d}:00:00.000")
    return example.result(player, match, points, at, at + 1000)


@pytest.fixture(scope="module")
def moved(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    tmp: Path = tmp_path_factory.mktemp("rank-change-api")
    path = tmp / "scores.jsonl"
    namespace = f"rc-{uuid.uuid4().hex[:10]}"
    opts = RunOptions(input=f"jsonl:{path}", until_eof=True, redis_url=redis_url, namespace=namespace, flow="boards",
                      dead_letter=f"jsonl:{tmp / 'dead.jsonl'}", signing_key=example.KEY, user_shards=2,
                      recovery_dir=str(tmp / "recovery"), extra={"rank_change": True})
    first = [result("ana", "m1", 10, 10), result("bo", "m1", 20, 10), result("dee", "m1", 5, 10)]
    path.write_bytes(b"".join(line + b"\n" for line in first))
    run(opts)
    with open(path, "ab") as out:
        out.write(result("ana", "m2", 30, 11) + b"\n" + result("cy", "m2", 15, 11) + b"\n")
    run(opts)
    return namespace


WANT = {"ana": 1, "bo": -1, "cy": None, "dee": -1}  # all: ana 40, bo 20, cy 15 (new), dee 5


def changes(items: list[dict[str, Any]]) -> dict[str, int | None]:
    return {item["player_id"]: item.get("rank_change") for item in items}


@pytest.mark.parametrize("index", INDEXES)
def test_every_route_answers_the_readers_rank_change(redis_url, moved, index):
    reader = BoardReader(redis.Redis.from_url(redis_url), moved)
    with serving(Settings(redis_url=redis_url, namespace=moved, board_index=index)) as api:
        for params in ({}, {"n": 3}, {"ties": "dense"}, {"after": ""}):
            top = api.get("/boards/g1/all/top", params=params)
            assert top.status_code == 200, top.text
            want = {p: c for p, c in WANT.items() if p in changes(top.json()["items"])}
            assert changes(top.json()["items"]) == want, params
        assert {**unjudged(api.get("/boards/g1/all/top").json()), "age_ms": 0} == {
            **reader.top("g1", "all", 10), "age_ms": 0}
        for player, change in WANT.items():
            answer = api.get(f"/boards/g1/all/players/{player}").json()
            assert answer.get("rank_change") == change, (player, answer)
            assert {**unjudged(answer), "age_ms": 0} == {**reader.player("g1", "all", player), "age_ms": 0}
        assert changes(api.get("/boards/g1/all/players/cy/around", params={"r": 1}).json()["items"]) == {
            "bo": -1, "cy": None, "dee": -1}
        assert changes(api.get("/boards/g1/all/players/dee/page", params={"n": 2}).json()["items"]) == {
            "cy": None, "dee": -1}


def test_openapi_names_rank_change(redis_url, moved):
    with serving(Settings(redis_url=redis_url, namespace=moved, board_index="redis")) as api:
        schemas = api.get("/openapi.json").json()["components"]["schemas"]
    for name in ("Entry", "PlayerRank"):
        field = schemas[name]["properties"]["rank_change"]
        assert "5.5" in field["description"] and "rank_change" not in schemas[name].get("required", [])


@pytest.mark.parametrize("index", INDEXES)
def test_since_answers_the_readers_and_refuses_what_is_not_retained(redis_url, moved, index):
    """``since`` (docs/semantics/boards.md 5.6) on the four routes: the reader's answers, read from Redis
    with either index; the game's day began with its first snapshot, so its day start is before it
    (every entry new, ``since_snapshot_id`` null); an id not retained is ``409`` naming the retained, as is a since on a final."""
    from rankflow.connectors.board_read import SinceNotRetained
    from rankflow.connectors.redis_keys import boards_namespace
    from rankflow.connectors.redis_read import read_history

    reader = BoardReader(redis.Redis.from_url(redis_url), moved)
    ids = [snap["snapshot_id"] for snap in read_history(reader.client, boards_namespace(moved))]
    retained = []
    for sid in ids:
        try:
            reader.top("g1", "all", 1, since=str(sid))
            retained.append(str(sid))
        except SinceNotRetained:
            pass
    assert retained and retained != [str(ids[-1])]  # the one before the board's last change

    def same(answer: dict[str, Any], want: dict[str, Any]) -> bool:
        return {**unjudged(answer), "age_ms": 0} == {**want, "age_ms": 0}

    with serving(Settings(redis_url=redis_url, namespace=moved, board_index=index)) as api:
        for since in ("day-start", *retained):
            top = api.get("/boards/g1/all/top", params={"n": 10, "since": since})
            assert top.status_code == 200 and same(top.json(), reader.top("g1", "all", 10, since=since)), top.text
            for player in WANT:
                got = api.get(f"/boards/g1/all/players/{player}", params={"since": since}).json()
                assert same(got, reader.player("g1", "all", player, since=since))
            got = api.get("/boards/g1/all/players/cy/around", params={"r": 1, "since": since}).json()
            assert same(got, reader.around("g1", "all", "cy", 1, since=since))
            got = api.get("/boards/g1/all/players/dee/page", params={"n": 2, "since": since}).json()
            assert same(got, reader.page("g1", "all", "dee", 2, since=since))
        day = api.get("/boards/g1/all/top", params={"since": "day-start"}).json()
        assert day["since_snapshot_id"] is None and all("rank_change" not in i for i in day["items"])
        assert changes(api.get("/boards/g1/all/top", params={"since": retained[-1]}).json()["items"]) == WANT
        gone = api.get("/boards/g1/all/top", params={"since": str(ids[-1] + 7)})
        assert gone.status_code == 409 and "day-start (before the first snapshot)" in gone.json()["error"], gone.text
        assert retained[-1] in gone.json()["error"]
        refused = api.get("/boards/g1/all/top", params={"since": "yesterday"})
        assert refused.status_code == 400, refused.text
        final = api.get("/boards/g1/final:daily:2027-01-04/players/ana", params={"since": "day-start"})
        assert final.status_code == 409 and "no rank change" in final.json()["error"], final.text
