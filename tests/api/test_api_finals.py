"""Final standings and seasons over HTTP (docs/semantics/boards.md 9): ``GET /boards/{game}/finals``
lists what the CLI's reader lists, and the board routes read a final and a season by name, with
both board indexes (the in-process copy leaves finals to Redis). The model check over random logs
is ``tests/boards/test_seasons.py``.
"""

from __future__ import annotations

import uuid

import pytest
import redis

from rankflow.api.app import Settings
from rankflow.connectors.board_read import BoardReader
from rankflow.connectors.finals_read import read_finals
from rankflow.options import RunOptions
from rankflow.runner import run
from rankflow.state.seasons import parse_seasons
from tests import boards_example as example
from tests.api.test_api_boards import INDEXES, serving
from tests.snapshot_stamp import unjudged

DAY = 86_400_000
START = example.ms("2027-01-01 10:00:00.000")


@pytest.fixture(scope="module")
def closed(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """Ten days of results: 2027-01-01 and the season 'opening' (its first two days) are finals."""
    tmp = tmp_path_factory.mktemp("finals-api")
    path = tmp / "scores.jsonl"
    namespace = f"fa-{uuid.uuid4().hex[:10]}"
    lines = [example.result(player, f"m{day}", 10 * (i + 1) + day, START + day * DAY, START + day * DAY)
             for day in range(11) for i, player in enumerate(("ana", "bo", "cy"))]
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    seasons = parse_seasons({"opening": {"start": "2027-01-01", "end": "2027-01-03"},
                             "late": {"start": "2027-01-10", "end": "2027-02-01"}})
    run(RunOptions(input=f"jsonl:{path}", until_eof=True, redis_url=redis_url, namespace=namespace, flow="boards",
                   dead_letter=f"jsonl:{tmp / 'dead.jsonl'}", signing_key=example.KEY,
                   extra={"seasons": seasons, "keep_final": 30}))
    return namespace


@pytest.mark.parametrize("index", INDEXES)
def test_finals_are_listed_and_read_like_boards(redis_url, closed, index):
    reader = BoardReader(redis.Redis.from_url(redis_url), closed)
    with serving(Settings(redis_url=redis_url, namespace=closed, board_index=index)) as api:
        listed = api.get("/boards/g1/finals")
        assert listed.status_code == 200, listed.text
        assert listed.json() == read_finals(redis.Redis.from_url(redis_url), closed, "g1")
        boards = {f["board"] for f in listed.json()["finals"]}
        assert {"final:daily:2027-01-01", "final:daily:2027-01-02", "final:season:opening"} <= boards
        assert api.get("/boards/nogame/finals").json()["finals"] == []
        for board in ("final:season:opening", "final:daily:2027-01-01", "season:late"):
            top = api.get(f"/boards/g1/{board}/top", params={"n": 3})
            assert top.status_code == 200, (board, top.text)
            assert {**unjudged(top.json()), "age_ms": 0} == {**reader.top("g1", board, 3), "age_ms": 0}
            assert [i["player_id"] for i in top.json()["items"]] == ["cy", "bo", "ana"]
            answer = api.get(f"/boards/g1/{board}/players/bo")
            assert answer.status_code == 200 and answer.json()["rank"] == 2, answer.text
            assert api.get(f"/boards/g1/{board}/players/bo/around", params={"r": 1}).status_code == 200
            assert api.get(f"/boards/g1/{board}/players/bo/page", params={"n": 2}).json()["page"] == 1
        assert api.get("/boards/g1/final:season:opening/top").json()["items"][0]["score"] == 30 + 31
        assert api.get("/boards/g1/daily:2027-01-01/top").status_code == 404  # the period itself is gone
        live = api.get("/boards").json()["games"]["g1"]["boards"]
        assert "season:late" in live and not any(b.startswith("final:") or b == "daily:2027-01-01" for b in live)
        assert api.get("/boards/g1/final:season:nope/top").status_code == 404
        assert api.get("/boards/g1/final:all/top").status_code == 400  # all and best have no final


def test_openapi_lists_the_finals_route(redis_url, closed):
    with serving(Settings(redis_url=redis_url, namespace=closed, board_index="redis")) as api:
        spec = api.get("/openapi.json").json()
    assert "/boards/{game}/finals" in spec["paths"]
    assert set(spec["components"]["schemas"]["Final"]["required"]) == {"game_id", "board", "closed_by", "players"}
