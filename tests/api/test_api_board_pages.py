"""Pages, percentiles and tie styles over HTTP (docs/semantics/boards.md 5.1 to 5.3).

The worked example of section 8, published by the real flow into a real Redis, read with
both board indexes (``--board-index redis`` and ``memory``, the ``api`` fixture of
``test_api_boards``): the answers are the model's (``tests/boards_model.py``), the same from
both, a top without the new parameters is the shared one as before, and every mistake is a
``400`` with one line.
"""

from __future__ import annotations

import fractions
from typing import Any

import pytest

from rankflow.connectors.board_pages import decode_cursor
from tests import boards_example as example, boards_model as model
from tests.api import test_api_boards

published = test_api_boards.published  # its fixtures: the worked example, served with both board indexes
api = test_api_boards.api

ENTRIES = {board: [(p, s, 0) for p, s, _, _ in rows] for board, rows in example.BOARDS.items()}


def styled(items: list[dict[str, Any]]) -> list[tuple[str, int, int]]:
    return [(i["player_id"], i["score"], i["rank"]) for i in items]


def get(api: Any, path: str, **params: Any) -> dict[str, Any]:
    r = api.get(path, params=params)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


@pytest.mark.parametrize("ties", [None, "ordinal", "competition", "dense"])
def test_pages_by_cursor_walk_every_board_once(api, ties):
    for board, entries in ENTRIES.items():
        extra = {} if ties is None else {"ties": ties}
        seen, page = [], get(api, f"/boards/g1/{board}/top", n=2, after="", **extra)
        while True:
            seen += styled(page["items"])
            if "next" not in page:
                break
            assert decode_cursor(page["next"]).player_id == page["items"][-1]["player_id"]
            page = get(api, f"/boards/g1/{board}/top", n=2, after=page["next"], **extra)
        assert seen == model.styled(entries, ties)
        top = get(api, f"/boards/g1/{board}/top", n=1000, **extra)
        assert styled(top["items"]) == model.styled(entries, ties) and "next" not in top


@pytest.mark.parametrize("ties", ["ordinal", "competition", "dense"])
def test_players_pages_percentiles_and_around_in_each_style(api, ties):
    for board, entries in ENTRIES.items():
        expected = model.styled(entries, ties)
        for at, (player, _, rank) in enumerate(expected):
            mine = get(api, f"/boards/g1/{board}/players/{player}", ties=ties)
            assert (mine["rank"], mine["percentile"]) == (rank, model.percentile(rank, len(entries)))
            on = get(api, f"/boards/g1/{board}/players/{player}/page", n=2, ties=ties)
            assert on["page"] == at // 2 + 1 and styled(on["items"]) == expected[at - at % 2:at - at % 2 + 2]
            around = get(api, f"/boards/g1/{board}/players/{player}/around", r=1, ties=ties)
            assert styled(around["items"]) == expected[max(0, at - 1):at + 2]
        for p in ("0", "20", "50", "79.99", "80", "100"):
            exact = fractions.Fraction(p)
            part = get(api, f"/boards/g1/{board}/top", n=10, percentile=p, ties=ties)
            assert styled(part["items"]) == model.top_percent(entries, ties, exact, 10)
            at = get(api, f"/boards/g1/{board}/score-for-percentile", p=p, ties=ties)
            assert at["score"] == model.score_for_percentile(entries, ties, exact) and at["percentile"] == float(exact)


def test_the_worked_example_s_ranks_in_the_three_styles(api):
    """Section 5.3's example: ``all`` is 50, 50, 50, 50, 0."""
    for ties, ranks in [("ordinal", [1, 2, 3, 4, 5]), ("competition", [1, 1, 1, 1, 5]), ("dense", [1, 1, 1, 1, 2])]:
        assert [i["rank"] for i in get(api, "/boards/g1/all/top", ties=ties)["items"]] == ranks
    assert get(api, "/boards/g1/all/players/eve", ties="dense")["percentile"] == 60.0
    assert get(api, "/boards/g1/all/players/eve")["percentile"] == 0.0


@pytest.mark.parametrize("path, params, says", [
    ("/boards/g1/all/top", {"after": "nope"}, "after is not a cursor"),
    ("/boards/g1/all/top", {"after": "", "percentile": "5.001"}, "a percentile is a number"),
    ("/boards/g1/all/top", {"percentile": "101"}, "a percentile is a number"),
    ("/boards/g1/all/top", {"ties": "olympic"}, "ties must be one of"),
    ("/boards/g1/all/players/eve", {"ties": "DENSE"}, "ties must be one of"),
    ("/boards/g1/all/players/eve/around", {"ties": "x"}, "ties must be one of"),
    ("/boards/g1/all/players/eve/page", {"n": "0"}, "n must be between"),
    ("/boards/g1/all/score-for-percentile", {"p": "1e2"}, "a percentile is a number"),
    ("/boards/g1/all/score-for-percentile", {}, "p"),
])
def test_mistakes_are_400_with_one_line(api, path, params, says):
    r = api.get(path, params=params)
    assert r.status_code == 400, r.text
    assert says in r.json()["error"] and "\n" not in r.json()["error"]


def test_a_player_not_on_the_board_has_no_page(api):
    r = api.get("/boards/g1/daily:2027-01-03/players/ana/page")
    assert r.status_code == 404 and "ana is not on g1/daily:2027-01-03" in r.json()["error"]


NEW_FORMS = ["/boards/g1/all/top?n=2&after=", "/boards/g1/all/top?ties=dense", "/boards/g1/all/top?n=2&ties=dense",
             "/boards/g1/all/top?n=3&percentile=40", "/boards/g1/all/players/eve?ties=dense",
             "/boards/g1/all/players/eve/around?r=1&ties=competition", "/boards/g1/all/players/eve/page?n=2",
             "/boards/g1/all/score-for-percentile?p=50&ties=dense"]
"""Forms of the prepared routes' paths (and the new routes) that the prepared answers must leave to FastAPI."""


@pytest.mark.parametrize("index", test_api_boards.INDEXES)
def test_the_prepared_paths_leave_the_new_parameters_to_the_app(redis_url, published, index):
    """Through ``rankflow serve``'s server, with its prepared answers and without: the same bytes
    (api.prepared matches no query but ``n=``, so a style, a cursor or a share is the app's)."""
    settings = test_api_boards.Settings(redis_url=redis_url, namespace=published["namespace"], board_index=index,
                                        stale_after_ms=test_api_boards.NEVER_STALE_MS)
    with test_api_boards.two_servers(settings) as (_, fast_port, full_port):
        fast, full = test_api_boards.Connection(fast_port), test_api_boards.Connection(full_port)
        for _ in range(2):
            for path in NEW_FORMS:
                mine, theirs = fast.get(path)[0], full.get(path)[0]
                assert mine.status == 200 and mine.comparable() == theirs.comparable(), path
        fast.close()
        full.close()
