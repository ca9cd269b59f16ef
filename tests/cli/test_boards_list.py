"""``rankflow boards list``, and what an unknown game or board answers: the names there are.

A user who does not know the games, or misspelt one, asks ``boards list`` (every game's
boards with their players, from one snapshot) or reads the names in the error: the boards
of the game, or the games, a few dozen at most. Against boards the real flow published.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from typing import Any

import orjson
import pytest

from rankflow.connectors.board_read import MAX_LISTED
from tests import boards_example as example

RANKFLOW = [sys.executable, "-m", "rankflow.cli"]
MANY = MAX_LISTED + 5  # games: more than a message lists
ORDER = ["all", "best", "daily:2027-01-04", "daily:2027-01-03", "daily:2027-01-02", "weekly:2027-W01", "weekly:2026-W53"]
"""The worked example's boards as listed: all, best, then the periods newest first."""


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*RANKFLOW, *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def worked(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The worked example of docs/semantics/boards.md section 8 (game g1), and the same results in
    ``MANY`` games besides (g00..), each a namespace of its own."""
    one = example.publish_boards(redis_url, tmp_path_factory.mktemp("one-game"), example.LINES)
    at = example.ms("2027-01-02 10:00:00.000")
    lines = [example.result("ana", f"m{i}", 10, at, at + 1000, game=f"g{i:02}") for i in range(MANY)]
    many = example.publish_boards(redis_url, tmp_path_factory.mktemp("many-games"), lines)
    return {"one": ["--redis", redis_url, "--namespace", one], "many": ["--redis", redis_url, "--namespace", many]}


def test_list_names_every_board_with_its_players(worked):
    listed = cli("boards", "list", *worked["one"], "--json")
    assert listed.returncode == 0, listed.stderr
    answer = orjson.loads(listed.stdout)
    assert answer["snapshot_id"] > 0
    aliases = {board: alias for alias, board in example.ALIASES.items()}
    assert answer["boards"] == [{"game_id": "g1", "board": board, "alias": aliases.get(board),
                                 "players": len(example.BOARDS[board])} for board in ORDER]

    table = cli("boards", "list", *worked["one"])
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0] == "Boards by game" and lines[-1] == f"snapshot {answer['snapshot_id']}", table.stdout
    assert "1 games, 7 boards" in lines[-2]
    assert any("g1" in line and "daily:2027-01-04 (daily)" in line and line.rstrip("│ ").endswith("3")
               for line in lines), table.stdout


def test_list_of_one_game_and_of_a_game_that_is_not_there(worked):
    one = cli("boards", "list", *worked["many"], "--game", "g03", "--json")
    assert one.returncode == 0, one.stderr
    assert [(b["game_id"], b["board"], b["players"]) for b in orjson.loads(one.stdout)["boards"]][:2] == [
        ("g03", "all", 1), ("g03", "best", 1)]
    missing = cli("boards", "list", *worked["many"], "--game", "g3")
    assert missing.returncode == 1
    assert missing.stderr.splitlines() == [
        "rankflow: no game 'g3'; games: " + ", ".join(f"g{i:02}" for i in range(MAX_LISTED)) + " and 5 more"]


def test_an_unknown_game_or_board_lists_the_ones_there_are(worked):
    board = cli("boards", "top", *worked["one"], "--game", "g1", "--board", "daily:2027-01-05")
    assert board.returncode == 1
    assert board.stderr.splitlines() == [
        "rankflow: no board 'daily:2027-01-05' in game 'g1'; its boards: all, best, daily:2027-01-04 (daily), "
        "daily:2027-01-03, daily:2027-01-02, weekly:2027-W01 (weekly), weekly:2026-W53"]
    game = cli("boards", "player", *worked["one"], "--game", "g2", "--board", "all", "--player", "ana")
    assert (game.returncode, game.stderr.splitlines()) == (1, ["rankflow: no game 'g2'; games: g1"])
    capped = cli("boards", "around", *worked["many"], "--game", "arena", "--board", "all", "--player", "ana")
    assert capped.returncode == 1 and capped.stderr.rstrip().endswith(" and 5 more"), capped.stderr
    misspelt = cli("boards", "top", *worked["one"], "--game", "g1", "--board", "weekley")
    assert misspelt.returncode == 2, "a name that is no board at all is a usage error, before Redis"
    assert "unknown board 'weekley': all, best, daily, weekly" in misspelt.stderr


def test_list_of_an_empty_namespace_says_nothing_is_published(redis_url):
    empty = cli("boards", "list", "--redis", redis_url, "--namespace", f"b-{uuid.uuid4().hex[:10]}")
    assert empty.returncode == 1
    assert empty.stderr.startswith("rankflow: no usable boards snapshot in namespace"), empty.stderr
