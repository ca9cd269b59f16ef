"""``POST /boards/{game}/{board}/ranks`` (docs/semantics/boards.md 5.4) on the worked example.

Both board indexes (Redis, and the in-process mirror) answer the worked example's ranks of a
set of players, the same as the reader the CLI uses; every bad body is a clear ``400``
(``413`` past 1 MiB) named in the OpenAPI, never FastAPI's ``422``. The model check of any set
on random boards is ``tests/boards/test_scoped_ranks.py``.
"""

from __future__ import annotations

import time
import uuid

import pytest
import redis
from fastapi.testclient import TestClient

from rankflow.api.app import Settings, create_app
from rankflow.api.boards import MAX_RANKS_BODY
from rankflow.connectors.board_read import BoardReader, no_snapshot
from rankflow.connectors.redis_generations import current_generation
from rankflow.connectors.redis_keys import Keys, boards_namespace
from tests import boards_example as example
from tests.api.test_api_boards import INDEXES, api, published, serving  # noqa: F401 - the module's fixtures
from tests.snapshot_stamp import ageless, stamped, unjudged

ASKED = ["eve", "zed", "bo", "eve", "ana/x"]


def test_a_set_of_players_in_board_order_with_the_others_apart(api, published, redis_url):  # noqa: F811
    r = api.post("/boards/g1/all/ranks", json={"players": ASKED})
    assert r.status_code == 200, r.text
    body = r.json()
    assert list(body)[:4] == ["snapshot_id", "published_at", "age_ms", "stale"]
    assert stamped(body, published["published_at"]) == {
        "snapshot_id": published["snapshot_id"], "published_at": published["published_at"], "game_id": "g1",
        "board": "all", "total_players": 5,
        "items": [{"rank": 2, "competition_rank": 1, "rank_in_set": 1, "player_id": "bo", "score": 50},
                  {"rank": 5, "competition_rank": 5, "rank_in_set": 2, "player_id": "eve", "score": 0}],
        "absent": ["zed", "ana/x"]}
    reader = BoardReader(redis.Redis.from_url(redis_url), published["namespace"])
    assert {**unjudged(body), "age_ms": 0} == {**reader.ranks("g1", "all", ASKED), "age_ms": 0}
    daily = api.post("/boards/g1/daily/ranks", json={"players": ["dee", "cy", "ana"]}).json()
    assert daily["board"] == "daily:2027-01-04" and daily["absent"] == ["ana"]
    assert [(i["player_id"], i["rank"], i["competition_rank"], i["rank_in_set"]) for i in daily["items"]] == [
        ("cy", 1, 1, 1), ("dee", 2, 1, 2)]
    dense = api.post("/boards/g1/all/ranks", params={"ties": "dense"}, json={"players": ASKED}).json()
    assert [(i["player_id"], i["rank"], i["competition_rank"], i["rank_in_set"]) for i in dense["items"]] == [
        ("bo", 1, 1, 1), ("eve", 2, 5, 2)]  # section 5.3: 50, 50, 50, 50, 0 are 1, 1, 1, 1, 2
    assert api.post("/boards/g1/all/ranks", params={"ties": "olympic"}, json={"players": ASKED}).status_code == 400
    empty = api.post("/boards/g1/best/ranks", json={"players": []}).json()
    assert (empty["items"], empty["absent"], empty["total_players"]) == ([], [], 5)


def test_bad_bodies_are_clear_400s_and_a_long_one_413(api):  # noqa: F811
    for body, error in [
        (b"players=ana", 'the body must be JSON: {"players": ["id", ...]}'),
        (b"", 'the body must be JSON'),
        (b'["ana"]', 'the body must be a JSON object with a list of player ids'),
        (b'{"player": ["ana"]}', 'the body must be a JSON object with a list of player ids'),
        (b'{"players": "ana"}', "players must be a list of player ids, got str"),
        (b'{"players": ["ana", 7]}', "players[1] must be a player id (a string of 1 to 64 characters), got 7"),
        (b'{"players": [""]}', "players[0] must be a player id"),
        (b'{"players": ["' + b"x" * 65 + b'"]}', "players[0] must be a player id"),
        (b'{"players": [%s]}' % b",".join(b'"p%d"' % i for i in range(1001)),
         "at most 1000 players per query, got 1001"),
    ]:
        r = api.post("/boards/g1/all/ranks", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 400 and r.json()["error"].startswith(error), (body[:40], r.text)
    r = api.post("/boards/g1/monthly/ranks", json={"players": ["ana"]})
    assert r.status_code == 400 and r.json()["error"].startswith("unknown board 'monthly'")
    r = api.post("/boards/g1/all/ranks", content=b" " * (MAX_RANKS_BODY + 1))
    assert (r.status_code, r.json()) == (413, {"error": f"the body is longer than {MAX_RANKS_BODY} bytes"})
    r = api.post("/boards/g1/daily:2027-01-05/ranks", json={"players": ["ana"]})
    assert r.status_code == 404 and r.json()["error"].startswith("no board 'daily:2027-01-05' in game 'g1'")
    assert api.get("/boards/g1/all/ranks").status_code == 405


def test_openapi_documents_the_body_the_answer_and_every_refusal(api):  # noqa: F811
    route = api.get("/openapi.json").json()["paths"]["/boards/{game}/{board}/ranks"]
    assert set(route) == {"post"}
    post = route["post"]
    schema = post["requestBody"]["content"]["application/json"]["schema"]
    assert schema["required"] == ["players"] and schema["properties"]["players"]["maxItems"] == 1000
    assert schema["properties"]["players"]["items"] == {"type": "string", "minLength": 1, "maxLength": 64}
    assert set(post["responses"]) == {"200", "400", "404", "409", "413", "503"}  # 409: a since not retained (5.6)
    answer = post["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    components = api.get("/openapi.json").json()["components"]["schemas"]
    assert {"items", "absent", "snapshot_id", "total_players"} <= set(components[answer]["properties"])
    entry = components[answer]["properties"]["items"]["items"]["$ref"].rsplit("/", 1)[1]
    assert "rank_in_set" in components[entry]["required"]


@pytest.mark.parametrize("path", ["/boards/g1/all/ranks"])
def test_a_ranks_answer_is_never_cached(api, path):  # noqa: F811
    r = api.post(path, json={"players": ["ana"]}, headers={"if-none-match": "*"})
    assert r.status_code == 200 and "etag" not in r.headers


@pytest.mark.parametrize("index", INDEXES)
def test_without_a_usable_snapshot_or_redis_it_is_a_503_as_every_board_read(redis_url, tmp_path, index):
    """Nothing published: ``503`` (never "no such board"); the snapshot lost after one was served:
    ``503``, with ``--board-index memory`` also the last answer this process had, marked stale;
    Redis unreachable: ``503``. A bad body stays a ``400`` throughout."""
    empty = f"e-{uuid.uuid4().hex[:8]}"
    with serving(Settings(redis_url=redis_url, namespace=empty, board_index=index)) as client:
        r = client.post("/boards/g1/all/ranks", json={"players": ["ana"]})
        assert (r.status_code, r.json()) == (503, {"error": no_snapshot(boards_namespace(empty))})
        assert client.post("/boards/g1/all/ranks", json={"players": [1]}).status_code == 400

    namespace = example.publish_boards(redis_url, tmp_path, example.LINES)
    with serving(Settings(redis_url=redis_url, namespace=namespace, board_index=index, poll_ms=20)) as client, \
            redis.Redis.from_url(redis_url) as direct:
        before = client.post("/boards/g1/all/ranks", json={"players": ASKED})
        assert before.status_code == 200, before.text
        keys = Keys(boards_namespace(namespace))
        direct.delete(keys.of_generation(current_generation(direct, keys.namespace)).snapshot_id)
        deadline = time.monotonic() + 30
        while (r := client.post("/boards/g1/all/ranks", json={"players": ASKED})).status_code != 503:
            assert time.monotonic() < deadline, r.text
            time.sleep(0.01)
        last = {**before.json(), "stale": True} if index == "memory" else {}
        assert ageless(r.json()) == ageless({"error": no_snapshot(boards_namespace(namespace)), **last})
        assert client.post("/boards/g1/all/ranks", content=b"{").status_code == 400

    from rankflow.services import free_port

    with TestClient(create_app(Settings(redis_url=f"redis://127.0.0.1:{free_port()}/0", board_index=index))) as client:
        r = client.post("/boards/g1/all/ranks", json={"players": ["ana"]})
        assert r.status_code == 503 and "cannot read the boards" in r.json()["error"]
