"""Seasons and final standings (docs/semantics/boards.md 9), against the model.

Hypothesis generates score logs over a few weeks (so retention drops days, weeks and a season)
and where to cut them; the real flow publishes each into a real Redis, one durable execution per
piece, with workers or processes. Every kept board, seasons included, is the model's; every final
Redis lists is the model's board of its period over exactly the input before the snapshot that
closed it (its listed positions), its period was dropped there, and the finals listed are the
model's dropped periods that ``--keep-final`` still keeps.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from rankflow.cli import main
from rankflow.connectors.board_read import BoardReader, NoSuchBoard, read_boards
from rankflow.connectors.finals_read import read_finals
from rankflow.options import RunOptions
from rankflow.runner import run
from rankflow.state.seasons import parse_seasons
from tests import boards_example as example
from tests.boards_model import BoardsModel

HOUR = 3_600_000
DAY = 24 * HOUR
START = example.ms("2026-12-20 00:00:00.000")
SEASONS = {"winter": ("2026-12-22", "2026-12-29T12:00:00Z"), "x.1": ("2026-12-20", "2026-12-21")}
SPANS = {name: (s.start, s.end) for name, (a, b) in SEASONS.items()
         for s in parse_seasons({name: {"start": a, "end": b}})}


def season_file(tmp: Path) -> str:
    path = tmp / "seasons.json"
    path.write_bytes(orjson.dumps({name: {"start": a, "end": b} for name, (a, b) in SEASONS.items()}))
    return str(path)


@st.composite
def long_logs(draw: st.DrawFn) -> list[bytes]:
    """Logs over some weeks: days and weeks pass, late results arrive for periods already dropped."""
    t = START
    lines: list[bytes] = []
    for _ in range(draw(st.integers(1, 40))):
        t += draw(st.sampled_from([0, HOUR, 12 * HOUR, DAY, 3 * DAY, 5 * DAY]))
        player = draw(st.sampled_from(["a", "b", "c", "d"]))
        game = draw(st.sampled_from(["g1", "g1", "g2"]))
        late = draw(st.sampled_from([0, 0, HOUR, 23 * HOUR]))
        # a late player: its receipt is its own, far behind the game's newest day
        received = t - draw(st.sampled_from([0, 0, 0, 9 * DAY]))
        lines.append(example.result(player, f"m{draw(st.integers(0, 9))}", draw(st.sampled_from([0, 10, 20])),
                                    received - late, received, game=game))
    return lines


def model(lines: list[bytes], path: Path) -> BoardsModel:
    m = BoardsModel(example.KEY, SPANS)
    for offset, line in enumerate(lines):
        m.feed(line, str(path), offset)
    return m


def executions(redis_url: str, tmp: Path, lines: list[bytes], ends: list[int], **options: Any) -> tuple[str, Path]:
    """A durable run resumed once per end in ``ends``, each execution over the lines up to it."""
    tmp = tmp / uuid.uuid4().hex[:8]
    tmp.mkdir()
    path = tmp / "scores.jsonl"
    namespace = f"se-{uuid.uuid4().hex[:10]}"
    extra = {"seasons": parse_seasons({n: {"start": a, "end": b} for n, (a, b) in SEASONS.items()}),
             "keep_final": options.pop("keep_final", 30)}
    opts = RunOptions(input=f"jsonl:{path}", redis_url=redis_url, namespace=namespace, flow="boards",
                      dead_letter=f"jsonl:{tmp / 'dead.jsonl'}", signing_key=example.KEY, until_eof=True,
                      recovery_dir=str(tmp / "recovery"), extra=extra, **{"song_partitions": 2, **options})
    for end in ends:
        path.write_bytes(b"".join(line + b"\n" for line in lines[:end]))
        run(opts)
    return namespace, path


def check_finals(client: Any, namespace: str, lines: list[bytes], path: Path, keep: int, drawn: bool = False) -> None:
    """The kept boards are the model's; every final is its period's board where it was closed.
    ``drawn``: under hypothesis (its statistics then say how many finals the examples reached)."""
    now = model(lines, path)
    assert read_boards(client, namespace) == now.boards()
    listed = read_finals(client, namespace)["finals"]
    if drawn:
        event(f"finals: {min(len(listed), 3)}{'+' if len(listed) >= 3 else ''}")
    expected = {(game, "final:" + name) for game, boards in now.dropped().items() for name in boards
                if (now.newest_day(game) - now.last_day(name)).days <= 7 + keep}
    assert {(f["game_id"], f["board"]) for f in listed} == expected
    reader = BoardReader(client, namespace)
    for final in listed:
        game, board = final["game_id"], final["board"]
        period = board[len("final:"):]
        closed = read_closing(client, namespace, game, board)
        then = model(lines[:closed], path)
        assert period in then.dropped()[game], (board, closed)
        want = then.periods()[game][period]
        top = reader.top(game, board, 1000)
        assert [(i["player_id"], i["score"]) for i in top["items"]] == [(p, s) for p, s, _ in want], board
        assert final["players"] == len(want) == top["total_players"]
        player = want[-1][0]
        assert reader.player(game, board, player)["rank"] == len(want)
        assert [i["player_id"] for i in reader.around(game, board, player, 1)["items"]] == [p for p, _, _ in want[-2:]]
        assert [i["player_id"] for i in reader.page(game, board, player, 2)["items"]] == [
            p for p, _, _ in want[(len(want) - 1) // 2 * 2:][:2]]
        with pytest.raises(NoSuchBoard):  # the period itself is gone
            reader.top(game, period, 10)


def read_closing(client: Any, namespace: str, game: str, board: str) -> int:
    """The lines before the snapshot that closed a final (its positions in the finals hash)."""
    from rankflow.connectors.redis_generations import current_generation
    from rankflow.connectors.redis_keys import Keys, boards_namespace

    keys = Keys(boards_namespace(namespace)).of_generation(current_generation(client, boards_namespace(namespace)))
    meta = orjson.loads(client.hget(keys.finals, orjson.dumps([game, board])))
    return int(sum(meta["positions"].values()))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=long_logs(), cuts=st.lists(st.integers(1, 40), max_size=3), partitions=st.integers(1, 3),
       shards=st.sampled_from([0, 2]), keep=st.sampled_from([1, 30]))
def test_seasons_and_finals_match_the_model_across_resumes(redis_url, redis_client, tmp_path, lines, cuts,
                                                           partitions, shards, keep):
    ends = sorted({min(cut, len(lines)) for cut in cuts} | {len(lines)})
    namespace, path = executions(redis_url, tmp_path, lines, ends, song_partitions=partitions, user_shards=shards,
                                 keep_final=keep)
    check_finals(redis_client, namespace, lines, path, keep, drawn=True)


@pytest.mark.parametrize("how", [{"workers": 2}, {"processes": 2}])
def test_seasons_and_finals_with_workers_and_processes(redis_url, redis_client, tmp_path, how):
    lines = fixed_log()
    namespace, path = executions(redis_url, tmp_path, lines, [len(lines) // 2, len(lines)], user_shards=2, **how)
    check_finals(redis_client, namespace, lines, path, 30)
    assert read_finals(redis_client, namespace)["finals"], "the log drops periods"


def fixed_log() -> list[bytes]:
    """Four weeks of results, each day's players; a late player posts for a day long dropped."""
    lines = []
    for day in range(28):
        for i, player in enumerate(("a", "b", "c", "d", "e")):
            t = START + day * DAY + i * HOUR
            lines.append(example.result(player, f"m{day}", (day * 7 + i * 3) % 20, t, t, game="g1"))
    lines.append(example.result("late", "m99", 50, START, START, game="g1"))  # for a day whose final is closed
    return lines


def test_the_cli_lists_finals_and_reads_one(redis_url, redis_client, tmp_path, capsys):
    lines = fixed_log()
    namespace, _ = executions(redis_url, tmp_path, lines, [len(lines) - 1, len(lines)])  # the late one after
    common = ["--redis", redis_url, "--namespace", namespace]
    capsys.readouterr()
    assert main(["boards", "finals", *common, "--json"]) == 0
    listed = orjson.loads(capsys.readouterr().out)
    boards = [f["board"] for f in listed["finals"]]
    assert "final:season:x.1" in boards and "final:daily:2026-12-20" in boards
    assert "final:season:winter" in boards  # its last day 2026-12-29 is more than 7 days before D, 2027-01-16
    assert main(["boards", "top", *common, "--game", "g1", "--board", "final:daily:2026-12-20", "--json"]) == 0
    top = orjson.loads(capsys.readouterr().out)
    assert top["board"] == "final:daily:2026-12-20" and "late" not in [i["player_id"] for i in top["items"]]
    assert main(["boards", "finals", *common]) == 0
    assert "final:daily:2026-12-20" in capsys.readouterr().out
    assert main(["boards", "top", *common, "--game", "g1", "--board", "final:season:winter"]) == 0


@pytest.mark.parametrize("text,says", [
    ("{", "is not valid JSON"),
    ('{"w": {"start": "2026-12-02"}}', "give exactly start and end"),
    ('{"w": {"start": "2026-12-02", "end": "2026-12-01"}}', "end must be after start"),
    ('{"w": {"start": "2026-12-02T10:00:00", "end": "2026-12-03"}}', "has no UTC offset"),
    ('{"a:b": {"start": "2026-12-02", "end": "2026-12-03"}}', "season name"),
    ('{"w": {"start": "soon", "end": "2026-12-03"}}', "is not an ISO date"),
])
def test_a_bad_seasons_file_is_one_line_and_exit_2(tmp_path, capsys, text, says):
    path = tmp_path / "s.json"
    path.write_text(text)
    # no service is asked: an address nothing listens on
    code = main(["run", "--flow", "boards", "--input", "kafka:127.0.0.1:1/t", "--redis", "redis://127.0.0.1:1/0",
                 "--seasons", str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and says in err[0] and "Traceback" not in err[0], err


def test_a_toml_seasons_file(tmp_path):
    from rankflow.state.seasons import read_seasons

    path = tmp_path / "s.toml"
    path.write_text('[winter]\nstart = 2026-12-22\nend = "2026-12-29T12:00:00Z"\n')
    assert [(s.board, s.start, s.end) for s in read_seasons(str(path))] == [
        ("season:winter", *SPANS["winter"])]


def test_keep_final_out_of_range_exits_2(capsys):
    with pytest.raises(SystemExit) as exited:  # argparse's own usage error
        main(["run", "--flow", "boards", "--input", "kafka:127.0.0.1:1/t", "--keep-final", "-1"])
    assert exited.value.code == 2
    assert "between 0 and 3660" in capsys.readouterr().err


def test_a_resume_keeps_its_seasons(redis_url, tmp_path):
    """The players' records hold their seasons' sums: a resume with other seasons, or none, is refused."""
    from rankflow.options import UsageError

    lines = fixed_log()[:10]
    namespace, path = executions(redis_url, tmp_path, lines, [len(lines)])
    recovery = path.parent / "recovery"
    base = dict(input=f"jsonl:{path}", redis_url=redis_url, namespace=namespace, flow="boards",
                dead_letter=f"jsonl:{path.parent / 'dead.jsonl'}", signing_key=example.KEY, until_eof=True,
                recovery_dir=str(recovery), song_partitions=2)
    for extra in ({}, {"seasons": parse_seasons({"other": {"start": "2026-12-01", "end": "2027-01-01"}})}):
        with pytest.raises(UsageError, match="seasons"):
            run(RunOptions(**base, extra=extra))
