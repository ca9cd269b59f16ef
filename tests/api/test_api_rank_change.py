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
