"""Group boards over HTTP (docs/semantics/boards.md 10), and rank change in scoped ranks (5.4, 5.5):
every board route reads a group's board by its name ``BOARD@FIELD=VALUE`` as the CLI's reader
does, with both board indexes (the in-process copy leaves groups to Redis); ``GET /boards`` lists
them under their game with the groups' aliases; the scoped ranks of a ``--rank-change`` run carry
each item's ``rank_change``, with ``since`` too. The model checks are
``tests/boards/test_groups.py`` and ``tests/boards/test_rank_change.py``.
"""

from __future__ import annotations

import uuid

import pytest
import redis

from rankflow.api.app import Settings
from rankflow.api.schemas_boards import BoardList, Ranks
from rankflow.connectors.board_read import BoardReader
from rankflow.options import RunOptions
from rankflow.runner import run
from tests import boards_example as example
from tests.api.test_api_boards import INDEXES, serving
from tests.boards.test_groups import line
from tests.snapshot_stamp import unjudged

DAY = 86_400_000
START = example.ms("2027-01-01 10:00:00.000")


@pytest.fixture(scope="module")
def grouped(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """Three days of results in regions eu and us (and none), published by a --group-by region
    --rank-change run in two executions, so every board has changed once since the first."""
    tmp = tmp_path_factory.mktemp("groups-api")
    path = tmp / "scores.jsonl"
    namespace = f"ga-{uuid.uuid4().hex[:10]}"
    lines = [line(player, f"m{day}", 10 * (i + 1) + day * (3 - i) * 7, START + day * DAY, START + day * DAY,
                  ("eu", "us", None)[(i + day) % 3])
             for day in range(3) for i, player in enumerate(("ana", "bo", "cy", "dee"))]
    opts = RunOptions(input=f"jsonl:{path}", until_eof=True, redis_url=redis_url, namespace=namespace, flow="boards",
                      dead_letter=f"jsonl:{tmp / 'dead.jsonl'}", signing_key=example.KEY, user_shards=2,
                      recovery_dir=str(tmp / "recovery"), extra={"group_by": "region", "rank_change": True})
    for end in (8, len(lines)):
        path.write_bytes(b"".join(raw + b"\n" for raw in lines[:end]))
        run(opts)
    return namespace


@pytest.mark.parametrize("index", INDEXES)
def test_group_boards_are_read_like_boards(redis_url, grouped, index):
    reader = BoardReader(redis.Redis.from_url(redis_url), grouped)
    with serving(Settings(redis_url=redis_url, namespace=grouped, board_index=index)) as api:
        listing = api.get("/boards")
        assert listing.status_code == 200, listing.text
        BoardList.model_validate(listing.json())
        g1 = listing.json()["games"]["g1"]
        assert g1 == reader.boards()["games"]["g1"]
        assert g1["groups"]["region=eu"] == {"daily": "daily:2027-01-03@region=eu",
                                             "weekly": "weekly:2026-W53@region=eu"}
        assert g1["boards"][:2] == ["all", "best"] and "all@region=us" in g1["boards"]
        for board in ("all@region=eu", "best@region=us", "daily@region=eu", "weekly:2026-W53@region=us"):
            top = api.get(f"/boards/g1/{board}/top", params={"n": 3})
            assert top.status_code == 200, (board, top.text)
            want = reader.top("g1", board, 3)
            assert {**unjudged(top.json()), "age_ms": 0} == {**want, "age_ms": 0}
            assert top.json()["board"].endswith(board[board.index("@"):]) and top.json()["game_id"] == "g1"
            player = want["items"][-1]["player_id"]
            answer = api.get(f"/boards/g1/{board}/players/{player}", params={"ties": "dense"})
            assert answer.status_code == 200, answer.text
            assert answer.json()["rank"] == reader.player("g1", board, player, ties="dense")["rank"]
            assert api.get(f"/boards/g1/{board}/players/{player}/around", params={"r": 1}).status_code == 200
            assert api.get(f"/boards/g1/{board}/players/{player}/page", params={"n": 2}).status_code == 200
            assert api.get(f"/boards/g1/{board}/top", params={"n": 1, "after": ""}).status_code == 200
            assert api.get(f"/boards/g1/{board}/score-for-percentile", params={"p": "50"}).status_code == 200
            ranks = api.post(f"/boards/g1/{board}/ranks", json={"players": [player, "nobody"]})
            assert ranks.status_code == 200 and ranks.json()["absent"] == ["nobody"], ranks.text
        missing = api.get("/boards/g1/all@region=xx/top")
        assert missing.status_code == 404 and "its boards: all, best" in missing.json()["error"]
        assert api.get("/boards/g1/all@region/top").status_code == 400


@pytest.mark.parametrize("index", INDEXES)
def test_scoped_ranks_carry_rank_change(redis_url, grouped, index):
    reader = BoardReader(redis.Redis.from_url(redis_url), grouped)
    with serving(Settings(redis_url=redis_url, namespace=grouped, board_index=index)) as api:
        for board in ("all", "best", "all@region=eu"):
            top = reader.top("g1", board, 100)
            want = {i["player_id"]: i.get("rank_change") for i in top["items"]}
            asked = list(reversed(want)) + ["nobody"]
            got = api.post(f"/boards/g1/{board}/ranks", json={"players": asked})
            assert got.status_code == 200, got.text
            Ranks.model_validate(got.json())
            assert {i["player_id"]: i.get("rank_change") for i in got.json()["items"]} == want, board
            since = api.post(f"/boards/g1/{board}/ranks", params={"since": "day-start"}, json={"players": asked})
            assert since.status_code == 200, since.text
            basis = reader.top("g1", board, 100, since="day-start")
            assert since.json()["since_snapshot_id"] == basis["since_snapshot_id"]
            assert {i["player_id"]: i.get("rank_change") for i in since.json()["items"]} == {
                i["player_id"]: i.get("rank_change") for i in basis["items"]}
        assert any("rank_change" in i for i in api.post("/boards/g1/all/ranks", json={"players": ["ana", "bo"]})
                   .json()["items"])
        refused = api.post("/boards/g1/all/ranks", params={"since": "12345"}, json={"players": ["ana"]})
        assert refused.status_code == 409, refused.text


@pytest.mark.parametrize("index", INDEXES)
def test_a_group_board_streams_its_top(redis_url, grouped, index):
    from tests.api.test_api_boards import sse_events

    reader = BoardReader(redis.Redis.from_url(redis_url), grouped)
    want = reader.top("g1", "daily@region=eu", 10)
    with serving(Settings(redis_url=redis_url, namespace=grouped, board_index=index)) as api:
        with api.stream("GET", "/boards/g1/daily@region=eu/stream") as stream:
            [(kind, event)] = sse_events(stream.iter_lines(), 1)
    assert kind == "board" and event["full"] is True, event
    assert (event["game_id"], event["board"], event["size"]) == ("g1", want["board"], len(want["items"]))
    assert [e["player_id"] for e in event["changed"]] == [i["player_id"] for i in want["items"]]
