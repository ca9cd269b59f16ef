"""Group boards (docs/semantics/boards.md 10), against the model.

Hypothesis generates score logs whose results carry a ``region`` (or none, or a malformed one)
over a few weeks, and where to cut them; the real flow with ``--group-by region`` publishes
each into a real Redis, one durable execution per piece, with and without player shards, with
workers or processes. Every kept board, the groups' included, is the model's; the malformed
group values are the model's dead letters; every reader (CLI, HTTP, pages, percentiles, ties,
scoped ranks, the listing) reads a group board by its name ``BOARD@region=VALUE``.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rankflow.cli import main
from rankflow.connectors.board_read import BoardReader, NoSuchBoard, read_aliases, read_boards
from rankflow.connectors.finals_read import read_finals
from rankflow.options import RunOptions
from rankflow.runner import run
from rankflow.state.seasons import parse_seasons
from tests import boards_example as example
from tests.boards_model import BoardsModel, around, rank_and_competition, scoped, signature

HOUR = 3_600_000
DAY = 24 * HOUR
START = example.ms("2026-12-20 00:00:00.000")
SEASON = {"winter": {"start": "2026-12-22", "end": "2026-12-29T12:00:00Z"}}
SPANS = {s.board[len("season:"):]: (s.start, s.end) for s in parse_seasons(SEASON)}
ABSENT = object()


def line(player: str, match: str, points: int, played_at: int, received_at: int, region: Any = ABSENT,
         game: str = "g1") -> bytes:
    """A signed result with a ``region`` (absent unless given: any JSON value, malformed ones too)."""
    event: dict[str, Any] = {"game_id": game, "match_id": match, "player_id": player, "points": points,
                             "played_at": played_at, "received_at": received_at,
                             "sig": signature(example.KEY, game, match, player, points, played_at)}
    if region is not ABSENT:
        event["region"] = region
    return json.dumps(event).encode()


REGIONS = st.sampled_from(["eu", "eu", "us", "ap.1", ABSENT, None, 7, "", "e u", "x" * 33])


@st.composite
def grouped_logs(draw: st.DrawFn) -> list[bytes]:
    """Logs over some weeks, results in a few regions (or none, or a bad one): days and weeks pass,
    a player plays in several regions, late results arrive for periods already dropped."""
    t = START
    lines: list[bytes] = []
    for _ in range(draw(st.integers(1, 40))):
        t += draw(st.sampled_from([0, HOUR, 12 * HOUR, DAY, 3 * DAY, 5 * DAY]))
        late = draw(st.sampled_from([0, 0, HOUR, 23 * HOUR]))
        game = draw(st.sampled_from(["g1", "g1", "g2", "g1@region=eu"]))  # the last: a game id groups refuse
        lines.append(line(draw(st.sampled_from(["a", "b", "c", "d"])), f"m{draw(st.integers(0, 9))}",
                          draw(st.sampled_from([0, 10, 20])), t - late, t, draw(REGIONS), game=game))
    return lines


def model(lines: list[bytes], path: Path, seasons: bool = True) -> BoardsModel:
    m = BoardsModel(example.KEY, SPANS if seasons else None, group_by="region")
    for offset, raw in enumerate(lines):
        m.feed(raw, str(path), offset)
    return m


def executions(redis_url: str, tmp: Path, lines: list[bytes], ends: list[int], **options: Any) -> tuple[str, Path]:
    """A durable run with ``--group-by region`` resumed once per end in ``ends``."""
    tmp = tmp / uuid.uuid4().hex[:8]
    tmp.mkdir()
    path = tmp / "scores.jsonl"
    namespace = f"gr-{uuid.uuid4().hex[:10]}"
    extra = {"group_by": "region", "seasons": parse_seasons(SEASON), **options.pop("extra", {})}
    opts = RunOptions(input=f"jsonl:{path}", redis_url=redis_url, namespace=namespace, flow="boards",
                      dead_letter=f"jsonl:{tmp / 'dead.jsonl'}", signing_key=example.KEY, until_eof=True,
                      recovery_dir=str(tmp / "recovery"), extra=extra, **{"song_partitions": 2, **options})
    for end in ends:
        path.write_bytes(b"".join(raw + b"\n" for raw in lines[:end]))
        run(opts)
    return namespace, path


def dead_letters(path: Path) -> list[tuple[str, int]]:
    out = path.parent / "dead.jsonl"
    rows = [orjson.loads(row) for row in out.read_bytes().splitlines()] if out.exists() else []
    return sorted((row["reason"], row["position"]["offset"]) for row in rows)


def check(client: Any, namespace: str, lines: list[bytes], path: Path) -> BoardsModel:
    m = model(lines, path)
    assert read_boards(client, namespace) == m.boards()
    assert {game: {k: f"{k}:{v}" for k, v in periods.items()}
            for game, periods in read_aliases(client, namespace).items()} == m.aliases()
    assert dead_letters(path) == sorted((reason, offset) for reason, _, offset in m.dead_letters)
    return m


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=grouped_logs(), cuts=st.lists(st.integers(1, 40), max_size=2), partitions=st.integers(1, 3),
       shards=st.sampled_from([0, 2]))
def test_group_boards_match_the_model_across_resumes(redis_url, redis_client, tmp_path, lines, cuts, partitions,
                                                     shards):
    ends = sorted({min(cut, len(lines)) for cut in cuts} | {len(lines)})
    namespace, path = executions(redis_url, tmp_path, lines, ends, song_partitions=partitions, user_shards=shards)
    check(redis_client, namespace, lines, path)


def fixed_log() -> list[bytes]:
    """Three weeks of results in two regions (a player in both), some without a region, a bad one."""
    lines = []
    for day in range(21):
        for i, player in enumerate(("a", "b", "c", "d", "e")):
            t = START + day * DAY + i * HOUR
            region = ("eu", "us", ABSENT)[(day + i) % 3]
            lines.append(line(player, f"m{day}", (day * 7 + i * 3) % 20, t, t, region))
    lines.append(line("f", "m99", 5, START, START, 7))  # wrong_type
    return lines


@pytest.mark.parametrize("how", [{"workers": 2}, {"processes": 2}])
def test_group_boards_with_workers_and_processes(redis_url, redis_client, tmp_path, how):
    lines = fixed_log()
    namespace, path = executions(redis_url, tmp_path, lines, [len(lines) // 2, len(lines)], user_shards=2, **how)
    m = check(redis_client, namespace, lines, path)
    assert {"g1@region=eu", "g1@region=us"} <= set(m.boards())


def test_readers_read_a_group_board_by_its_name(redis_url, redis_client, tmp_path, capsys):
    lines = fixed_log()
    namespace, path = executions(redis_url, tmp_path, lines, [len(lines)])
    m = model(lines, path)
    reader = BoardReader(redis_client, namespace)
    listing = reader.boards()["games"]
    assert list(listing) == ["g1"]  # the groups are boards of their game
    eu_daily = m.aliases()["g1@region=eu"]["daily"]
    assert listing["g1"]["groups"]["region=eu"]["daily"] == eu_daily + "@region=eu"
    assert "all@region=us" in listing["g1"]["boards"] and "weekly@region=eu" not in listing["g1"]["boards"]
    for board, key in (("all@region=eu", "all"), ("best@region=us", "best"), ("daily@region=eu", eu_daily),
                       ("weekly@region=us", m.aliases()["g1@region=us"]["weekly"])):
        want = m.boards()[f"g1@region={board.rpartition('=')[2]}"][key]
        top = reader.top("g1", board, 1000)
        concrete = key + board[board.index("@"):]
        assert (top["game_id"], top["board"], top["total_players"]) == ("g1", concrete, len(want))
        assert [(i["player_id"], i["score"]) for i in top["items"]] == [(p, s) for p, s, _ in want]
        ranked = rank_and_competition(want)
        player = want[-1][0]
        got = reader.player("g1", board, player, ties="competition")
        assert (got["board"], got["rank"]) == (concrete, ranked[-1][3])
        assert [i["player_id"] for i in reader.around("g1", board, player, 1)["items"]] == [
            p for p, *_ in around(want, player, 1)]
        first = reader.top("g1", board, 2, after="")
        if len(want) > 2:
            assert [i["player_id"] for i in reader.top("g1", board, 2, after=first["next"])["items"]] == [
                p for p, _, _ in want[2:4]]
        asked = [want[0][0], "nobody"]
        ranks = reader.ranks("g1", board, asked)
        assert [i["player_id"] for i in ranks["items"]] == [p for p, *_ in scoped(want, asked)[0]]
        assert ranks["board"] == concrete and ranks["absent"] == ["nobody"]
        assert reader.score_for_percentile("g1", board, "0")["score"] == want[-1][1]
    final = reader.top("g1", "final:season:winter@region=us", 1000)  # a group's season, closed by retention
    assert final["board"] == "final:season:winter@region=us" and final["total_players"] > 0
    listed = {(f["game_id"], f["board"]): f["players"] for f in read_finals(redis_client, namespace, "g1")["finals"]}
    assert listed[("g1", "final:season:winter@region=us")] == final["total_players"]
    assert ("g1", "final:season:winter") in listed  # the game's own
    with pytest.raises(NoSuchBoard, match="no board 'all@region=xx' in game 'g1'; its boards: all, best"):
        reader.top("g1", "all@region=xx", 10)
    with pytest.raises(NoSuchBoard, match="its groups: region=eu, region=us$"):  # a reader naming another field
        reader.player("g1", "best@platform=pc", "a")
    common = ["--redis", redis_url, "--namespace", namespace]
    capsys.readouterr()
    assert main(["boards", "top", *common, "--game", "g1", "--board", "weekly@region=eu", "--json"]) == 0
    assert orjson.loads(capsys.readouterr().out)["board"] == m.aliases()["g1@region=eu"]["weekly"] + "@region=eu"
    assert main(["boards", "list", *common]) == 0
    assert "all@region=eu" in capsys.readouterr().out
    assert main(["boards", "top", *common, "--game", "g1", "--board", "all@region"]) == 2  # not a board name


@pytest.mark.parametrize("field,says", [
    ("1st", "is not a field name"),
    ("re-gion", "is not a field name"),
    ("points", "one of a result's own fields"),
    ("x" * 33, "is not a field name"),
])
def test_a_bad_group_field_is_one_line_and_exit_2(capsys, field, says):
    # no service is asked: an address nothing listens on
    code = main(["run", "--flow", "boards", "--input", "kafka:127.0.0.1:1/t", "--redis", "redis://127.0.0.1:1/0",
                 "--group-by", field])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and says in err[0] and "Traceback" not in err[0], err


def test_a_resume_keeps_its_group_field(redis_url, tmp_path):
    """The players' records hold their groups' boards: a resume grouping by another field, or none, is refused."""
    from rankflow.options import UsageError

    lines = fixed_log()[:10]
    namespace, path = executions(redis_url, tmp_path, lines, [len(lines)])
    base = dict(input=f"jsonl:{path}", redis_url=redis_url, namespace=namespace, flow="boards",
                dead_letter=f"jsonl:{path.parent / 'dead.jsonl'}", signing_key=example.KEY, until_eof=True,
                recovery_dir=str(path.parent / "recovery"), song_partitions=2)
    for extra in ({"seasons": parse_seasons(SEASON)}, {"seasons": parse_seasons(SEASON), "group_by": "platform"}):
        with pytest.raises(UsageError, match="group-by"):
            run(RunOptions(**base, extra=extra))
