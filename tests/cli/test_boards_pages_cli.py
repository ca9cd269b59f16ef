"""``rankflow boards top --after / --percentile / --ties``, ``boards page`` and ``boards
score-for-percentile`` (docs/semantics/boards.md 5.1 to 5.3), against the worked example the
real flow published: the same answers as the reader's (``--json``), a table that says the next
page's cursor, and every mistake one line and exit 2 before Redis is asked.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import orjson
import pytest

from rankflow.connectors.board_read import BoardReader
from tests import boards_example as example

RANKFLOW = [sys.executable, "-m", "rankflow.cli"]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*RANKFLOW, *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def worked(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    namespace = example.publish_boards(redis_url, tmp_path_factory.mktemp("pages"), example.LINES)
    return {"args": ["--game", "g1", "--redis", redis_url, "--namespace", namespace], "namespace": namespace,
            "url": redis_url}


def answer(*args: str) -> dict[str, Any]:
    r = cli(*args, "--json")
    assert r.returncode == 0, r.stderr
    out: dict[str, Any] = orjson.loads(r.stdout)
    return out


def without_age(a: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in a.items() if k != "age_ms"}


def test_pages_by_cursor_from_the_command_line(worked, redis_client):
    reader = BoardReader(redis_client, worked["namespace"])
    first = answer("boards", "top", "--board", "all", "-n", "2", "--after", "", *worked["args"])
    assert without_age(first) == without_age(reader.top("g1", "all", 2, after=""))
    second = answer("boards", "top", "--board", "all", "-n", "2", "--after", first["next"], *worked["args"])
    assert [i["player_id"] for i in second["items"]] == ["cy", "dee"]
    table = cli("boards", "top", "--board", "all", "-n", "2", "--after", second["next"], "--ties", "dense",
                *worked["args"])
    assert table.returncode == 0 and "eve" in table.stdout and "next page" not in table.stdout, table.stdout
    table = cli("boards", "top", "--board", "all", "-n", "2", "--after", "", *worked["args"])
    assert f"next page: --after {first['next']}" in table.stdout, table.stdout


def test_a_player_s_page_percentile_and_tie_styles(worked):
    page = answer("boards", "page", "--board", "best", "--player", "bo", "-n", "3", "--ties", "competition",
                  *worked["args"])
    assert page["page"] == 2 and [(i["player_id"], i["rank"]) for i in page["items"]] == [("bo", 4), ("eve", 5)]
    eve = answer("boards", "player", "--board", "all", "--player", "eve", "--ties", "dense", *worked["args"])
    assert (eve["rank"], eve["percentile"]) == (2, 60.0)
    part = answer("boards", "top", "--board", "all", "--percentile", "40", "--ties", "competition", *worked["args"])
    # the top 40 % of 5 is rank 2 at most: the four sharing competition rank 1
    assert [i["player_id"] for i in part["items"]] == ["ana", "bo", "cy", "dee"]
    table = cli("boards", "score-for-percentile", "--board", "all", "--percentile", "50", *worked["args"])
    assert table.returncode == 0 and "percentile 50.0 on g1 / all: score 50" in table.stdout, table.stdout
    around = answer("boards", "around", "--board", "all", "--player", "eve", "-r", "1", "--ties", "dense",
                    *worked["args"])
    assert [(i["player_id"], i["rank"]) for i in around["items"]] == [("dee", 1), ("eve", 2)]


@pytest.mark.parametrize("args, says", [
    (["top", "--board", "all", "--after", "nope"], "after is not a cursor a page gave"),
    (["top", "--board", "all", "--after", "", "--percentile", "3%"], "a percentile is a number"),
    (["top", "--board", "all", "--ties", "olympic"], "ties must be one of ordinal, competition, dense"),
    (["page", "--board", "all", "--player", "a", "-n", "0"], "n must be between 1 and 1000"),
    (["score-for-percentile", "--board", "all", "--percentile", "100.001"], "a percentile is a number"),
])
def test_mistakes_are_one_line_and_exit_2_before_redis(args, says):
    r = cli("boards", *args, "--game", "g", "--redis", "redis://127.0.0.1:1")  # nothing listens there
    assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
