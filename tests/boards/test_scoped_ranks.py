"""Scoped ranks (docs/semantics/boards.md 5.4): the ranks of a set of players, against the model.

A random score log (few players, ties, two games, the year end's periods) runs through the
real flow into a real Redis once; then hypothesis asks random sets of players (repeated,
absent, on every board and alias) of the Redis reader (one script call) and of the
in-process mirror loaded from the same Redis, and both must answer exactly what the
reference model (``tests/boards_model.scoped``) gives, from one snapshot. The limits and the
CLI's usage errors (checked before Redis is asked) follow.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rankflow.api.board_mirror import BoardMirror
from rankflow.cli import main
from rankflow.connectors.board_read import MAX_PLAYERS, BoardReader, NoSuchBoard
from tests import boards_example as example
from tests.boards.test_boards_flow import model_of, random_log, run_boards
from tests.boards_model import scoped

PLAYERS = [f"p{i}" for i in range(12)] + ["é", "🎮"]
STRANGERS = ["nobody", "p99", "P1", "p1 "]
STAMP = ("snapshot_id", "published_at", "age_ms")


@pytest.fixture(scope="module")
def published(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("scoped")
    lines = random_log(random.Random(42), 400)
    out = run_boards(redis_url, tmp, lines, signing_key=example.KEY, song_partitions=3)
    model = model_of(lines, example.KEY, out["path"])
    return {**out, "boards": model.boards(), "aliases": model.aliases()}


@pytest.fixture(scope="module")
def mirror(redis_url: str, published: dict[str, Any]) -> BoardMirror:
    """The mirror of ``rankflow serve --board-index memory``, loaded once (nothing publishes after)."""

    async def load() -> BoardMirror:
        client = aioredis.Redis.from_url(redis_url)
        loaded = BoardMirror(client, published["namespace"])
        try:
            await loaded.load()
        finally:
            await client.aclose()
        return loaded

    loaded = asyncio.run(load())
    assert loaded.ready
    return loaded


def expected(published: dict[str, Any], game: str, board: str, players: list[str],
             ties: str | None = None) -> dict[str, Any]:
    name = published["aliases"][game].get(board, board)
    entries = published["boards"][game][name]
    on, absent = scoped(entries, players, ties)
    return {"snapshot_id": published["final"]["snapshot_id"], "game_id": game, "board": name,
            "total_players": len(entries),
            "items": [{"rank": rank, "competition_rank": competition, "rank_in_set": place, "player_id": player,
                       "score": score} for player, score, rank, competition, place in on],
            "absent": absent}


def unstamped(answer: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in answer.items() if key not in STAMP[1:]}


boards = st.sampled_from(["all", "best", "daily", "weekly"])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(game=st.sampled_from(["g1", "g2"]), board=boards, day=st.integers(0, 9),
       players=st.lists(st.sampled_from(PLAYERS + STRANGERS), max_size=20),
       ties=st.sampled_from([None, "ordinal", "competition", "dense"]))
def test_any_set_of_players_is_the_models_from_redis_and_from_the_mirror(redis_client, published, mirror, game,
                                                                         board, day, players, ties):
    if board == "daily" and day:  # a concrete daily board, kept or dropped, besides the alias
        board = f"daily:2027-01-{day:02d}" if day < 5 else f"daily:2026-12-{26 + day:02d}"
    reader = BoardReader(redis_client, published["namespace"])
    name = published["aliases"][game].get(board, board)
    if name not in published["boards"][game]:
        with pytest.raises(NoSuchBoard):
            reader.ranks(game, board, players, ties=ties)
        with pytest.raises(NoSuchBoard):
            mirror.ranks(game, board, players, ties=ties)
        return
    want = expected(published, game, board, players, ties)
    got = reader.ranks(game, board, players, ties=ties)
    assert list(got)[:3] == list(STAMP)
    assert unstamped(got) == want
    assert unstamped(mirror.ranks(game, board, players, ties=ties)) == want


def test_up_to_1000_players_and_no_more(redis_client, published, mirror):
    reader = BoardReader(redis_client, published["namespace"])
    many = PLAYERS + [f"x{i}" for i in range(MAX_PLAYERS - len(PLAYERS))]
    for answer in (reader.ranks("g1", "all", many), mirror.ranks("g1", "all", many)):
        assert unstamped(answer) == expected(published, "g1", "all", many)
        assert len(answer["absent"]) == MAX_PLAYERS - len(answer["items"])
    for bad, message in ((many + ["one more"], "at most 1000 players per query, got 1001"),
                         (["p1", ""], r"players\[1\] must be a player id"),
                         (["p1", "x" * 65], r"players\[1\] must be a player id .* got 'xxxx"),
                         (["p1", None], r"players\[1\] must be a player id .* got None"),
                         ("p1,p2", "players must be a list of player ids, got str")):
        with pytest.raises(ValueError, match=message):
            reader.ranks("g1", "all", bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=message):
            mirror.ranks("g1", "all", bad)  # type: ignore[arg-type]


def test_the_cli_answers_from_a_list_or_a_file(redis_url, published, tmp_path, capsysbinary):
    common = ["--redis", redis_url, "--namespace", published["namespace"], "--game", "g1", "--board", "all"]
    asked = ["p3", "nobody", "p1", "p3", "é"]
    capsysbinary.readouterr()
    assert main(["boards", "ranks", *common, "--players", ",".join(asked), "--json"]) == 0
    answer = orjson.loads(capsysbinary.readouterr().out)
    assert unstamped(answer) == expected(published, "g1", "all", asked)
    listed = tmp_path / "friends.txt"
    listed.write_text("\n".join(asked) + "\n\n", encoding="utf-8")
    assert main(["boards", "ranks", *common, "--players-file", str(listed), "--json"]) == 0
    assert unstamped(orjson.loads(capsysbinary.readouterr().out)) == unstamped(answer)
    assert main(["boards", "ranks", *common, "--players", ",".join(asked), "--ties", "dense", "--json"]) == 0
    assert unstamped(orjson.loads(capsysbinary.readouterr().out)) == expected(published, "g1", "all", asked, "dense")
    assert main(["boards", "ranks", *common, "--players-file", str(listed)]) == 0  # a table
    table = capsysbinary.readouterr().out.decode()
    assert "rank_in_set" in table and "not on it: nobody" in table


@pytest.mark.parametrize("args, message", [
    (["--players", ",".join(f"x{i}" for i in range(1001))], "at most 1000 players per query, got 1001"),
    (["--players", "a," + "x" * 65], "players[1] must be a player id"),
    (["--players-file", "/nonexistent/friends.txt"], "cannot read --players-file /nonexistent/friends.txt"),
    (["--players", "a", "--board", "monthly"], "unknown board 'monthly'"),
    (["--players", "a", "--ties", "olympic"], "ties must be one of"),
])
def test_cli_usage_errors_are_one_line_and_exit_2_before_redis(args, message, capsysbinary):
    # nothing listens on port 1: the mistake is found before Redis is asked
    assert main(["boards", "ranks", "--redis", "redis://127.0.0.1:1/0", "--game", "g1", "--board", "all",
                 *args]) == 2
    err = capsysbinary.readouterr().err.decode()
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_cli_players_and_a_file_are_one_or_the_other(tmp_path: Path, capsysbinary):
    with pytest.raises(SystemExit) as exited:
        main(["boards", "ranks", "--game", "g1", "--board", "all", "--players", "a", "--players-file", "f"])
    assert exited.value.code == 2
    assert b"not allowed with argument" in capsysbinary.readouterr().err
