"""Rank change (docs/semantics/boards.md 5.5): ``rank_change`` on every entry, against the model.

Hypothesis generates score logs and where to cut them; the real flow (``--rank-change``) publishes
each into a real Redis, one durable execution per piece (so Redis stores a snapshot at least at
every cut), and one live run with two workers follows a growing log. Which snapshots Redis stored
is in its snapshots stream, each with its input position: the model (``tests/boards_model``) over
the lines before each position is the boards Redis held then, so for every board the previous
snapshot that changed it, and every entry's rank there, follow from the model alone. Every entry
of a top, of an around and of a page, and every player's answer, must carry exactly the positions
gained since then, and none for an entry new since. A durable run resumed with more input answers
the same way, and a run without the option answers no ``rank_change`` at all.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rankflow.cli import main
from rankflow.connectors.board_read import BoardReader
from rankflow.connectors.redis_keys import boards_namespace
from rankflow.connectors.redis_read import read_history
from rankflow.options import RunOptions
from rankflow.runner import run
from tests import boards_example as example
from tests.boards.test_boards_flow import model_of, score_logs

Entries = list[tuple[str, int, int]]
Changes = dict[str, dict[str, dict[str, int | None]]]  # game -> board -> player -> rank change


def stored_positions(client: redis.Redis, namespace: str, path: Path) -> list[int]:
    """The lines before each snapshot Redis stored, oldest first (its snapshots stream)."""
    return [snap["positions"].get(str(path), 0) for snap in read_history(client, boards_namespace(namespace))]


def expected_changes(lines: list[bytes], stored: list[int], path: Path) -> Changes:
    """Per board of the last stored snapshot, each player's rank change: the model's boards at every
    stored snapshot, the last one whose board differs from the one before it (nothing before the
    first), and each player's rank there minus the rank now; None for a player not on it then."""
    states: list[dict[str, dict[str, Entries]]] = [{}]
    states += [model_of(lines[:n], example.KEY, str(path)).boards() for n in stored]
    out: Changes = {}
    for game, boards in states[-1].items():
        for name, now in boards.items():
            seen = [state.get(game, {}).get(name, []) for state in states]  # entries in rank order
            last = max(i for i in range(1, len(seen)) if seen[i] != seen[i - 1])
            then = {player: rank for rank, (player, _, _) in enumerate(seen[last - 1])}
            out.setdefault(game, {})[name] = {player: then[player] - rank if player in then else None
                                              for rank, (player, _, _) in enumerate(now)}
    return out


def changes_of(items: list[dict[str, Any]]) -> dict[str, int | None]:
    return {item["player_id"]: item.get("rank_change") for item in items}


def check_answers(client: redis.Redis, namespace: str, want: Changes) -> None:
    """Every read of every board answers the model's rank changes."""
    reader = BoardReader(client, namespace)
    for game, boards in want.items():
        for board, changes in boards.items():
            assert changes_of(reader.top(game, board, 1000)["items"]) == changes, (game, board)
            assert changes_of(reader.top(game, board, 1000, ties="dense")["items"]) == changes, (game, board)
            paged = reader.top(game, board, 2, after="")
            seen = changes_of(paged["items"])
            while "next" in paged:
                paged = reader.top(game, board, 2, after=paged["next"])
                seen.update(changes_of(paged["items"]))
            assert seen == changes, (game, board)
            for player, change in changes.items():
                assert reader.player(game, board, player).get("rank_change") == change, (game, board, player)
                around = changes_of(reader.around(game, board, player, 1)["items"])
                assert around == {p: changes[p] for p in around}, (game, board, player)
                page = changes_of(reader.page(game, board, player, 3)["items"])
                assert page == {p: changes[p] for p in page}, (game, board, player)


def flow_options(redis_url: str, path: Path, namespace: str, tmp: Path, **more: Any) -> RunOptions:
    """A boards run over ``path`` (until its end)."""
    return RunOptions(input=f"jsonl:{path}", redis_url=redis_url, namespace=namespace, flow="boards",
                      dead_letter=f"jsonl:{tmp / 'dead.jsonl'}", signing_key=example.KEY,
                      **{"song_partitions": 2, "until_eof": True, **more})


def executions(redis_url: str, tmp: Path, lines: list[bytes], ends: list[int], **options: Any) -> tuple[str, Path]:
    """A durable run (one recovery directory) resumed once per end in ``ends``, each execution over
    the log's lines up to it: Redis stores at least one snapshot per execution."""
    tmp = tmp / uuid.uuid4().hex[:8]
    tmp.mkdir()
    path = tmp / "scores.jsonl"
    namespace = f"rc-{uuid.uuid4().hex[:10]}"
    opts = flow_options(redis_url, path, namespace, tmp, recovery_dir=str(tmp / "recovery"), **options)
    for end in ends:
        path.write_bytes(b"".join(line + b"\n" for line in lines[:end]))
        run(opts)
    return namespace, path


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=score_logs(), cuts=st.lists(st.integers(1, 40), max_size=4), partitions=st.integers(1, 3),
       shards=st.sampled_from([0, 2]))
def test_every_entry_carries_the_models_rank_change(redis_url, redis_client, tmp_path, lines, cuts, partitions,
                                                    shards):
    ends = sorted({min(cut, len(lines)) for cut in cuts} | {len(lines)})
    namespace, path = executions(redis_url, tmp_path, lines, ends, song_partitions=partitions, user_shards=shards,
                                 extra={"rank_change": True})
    stored = stored_positions(redis_client, namespace, path)
    assert set(ends) <= set(stored)
    check_answers(redis_client, namespace, expected_changes(lines, stored, path))


def test_a_durable_run_resumed_with_more_input_answers_the_same(redis_url, redis_client, tmp_path):
    """Two executions with one recovery directory, the second over more lines: rank changes follow
    the snapshots Redis stored across both, as one run's would."""
    import random

    from tests.boards.test_boards_flow import random_log

    lines = random_log(random.Random(5), 120)
    path = tmp_path / "scores.jsonl"
    namespace = f"rc-{uuid.uuid4().hex[:10]}"
    opts = flow_options(redis_url, path, namespace, tmp_path, user_shards=2, recovery_dir=str(tmp_path / "recovery"),
                        extra={"rank_change": True})
    path.write_bytes(b"".join(line + b"\n" for line in lines[:70]))
    run(opts)
    first = stored_positions(redis_client, namespace, path)
    check_answers(redis_client, namespace, expected_changes(lines[:70], first, path))
    with open(path, "ab") as out:
        out.write(b"".join(line + b"\n" for line in lines[70:]))
    run(opts)
    stored = stored_positions(redis_client, namespace, path)
    assert stored[:len(first)] == first and stored[-1] == len(lines)
    want = expected_changes(lines, stored, path)
    assert any(change not in (None, 0) for boards in want.values() for changes in boards.values()
               for change in changes.values())  # the log moves entries, so the check checks something
    check_answers(redis_client, namespace, want)


def test_without_the_option_no_answer_has_rank_change_and_turning_it_on_forgets_old_moves(
        redis_url, redis_client, tmp_path):
    """Off: nothing kept, nothing answered. A later run with the option answers only from the changes
    it published itself: an earlier run's moves (then off, then on again) are forgotten."""
    import random

    from tests.boards.test_boards_flow import random_log

    lines = random_log(random.Random(9), 90)
    path = tmp_path / "scores.jsonl"
    namespace = f"rc-{uuid.uuid4().hex[:10]}"
    recovery = str(tmp_path / "recovery")

    def execution(upto: int, rank_change: bool) -> None:
        path.write_bytes(b"".join(line + b"\n" for line in lines[:upto]))
        run(flow_options(redis_url, path, namespace, tmp_path, user_shards=2, recovery_dir=recovery,
                         extra={"rank_change": rank_change}))

    execution(30, True)
    execution(60, False)
    reader = BoardReader(redis_client, namespace)
    for board in ("all", "best"):
        top = reader.top("g1", board, 1000)
        assert all("rank_change" not in item for item in top["items"])
        assert "rank_change" not in reader.player("g1", board, top["items"][0]["player_id"])
    assert not redis_client.exists(f"{{{boards_namespace(namespace)}}}:g0:rank_change")
    execution(90, True)
    stored = stored_positions(redis_client, namespace, path)
    since_on = [n for n in stored if n > 60]  # the snapshots of the run that turned it on again
    want = expected_changes(lines, stored, path)
    before = [n for n in stored if n <= 60]
    for game, boards in want.items():
        for board in boards:
            changed_since = any(
                model_of(lines[:a], example.KEY, str(path)).boards().get(game, {}).get(board)
                != model_of(lines[:b], example.KEY, str(path)).boards().get(game, {}).get(board)
                for a, b in zip([before[-1]] + since_on, since_on))
            if not changed_since:  # nothing kept for it since the option came back: no rank change
                boards[board] = {player: None for player in boards[board]}
    check_answers(redis_client, namespace, want)


def test_the_cli_shows_rank_change(redis_url, redis_client, tmp_path, capsys):
    lines = [example.result("ana", "m1", 10, example.ms("2027-01-04 10:00:00.000"), example.ms("2027-01-04 10:00:01.000")),
             example.result("bo", "m1", 20, example.ms("2027-01-04 10:00:00.000"), example.ms("2027-01-04 10:00:01.000"))]
    path = tmp_path / "scores.jsonl"
    namespace = f"rc-{uuid.uuid4().hex[:10]}"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    opts = flow_options(redis_url, path, namespace, tmp_path, user_shards=2, recovery_dir=str(tmp_path / "r"),
                        extra={"rank_change": True})
    run(opts)
    with open(path, "ab") as out:  # ana passes bo
        out.write(example.result("ana", "m2", 30, example.ms("2027-01-04 11:00:00.000"),
                                 example.ms("2027-01-04 11:00:01.000")) + b"\n")
    run(opts)
    common = ["--redis", redis_url, "--namespace", namespace, "--game", "g1", "--board", "all"]
    capsys.readouterr()
    assert main(["boards", "top", *common, "-n", "5", "--json"]) == 0
    import orjson

    items = orjson.loads(capsys.readouterr().out)["items"]
    assert [(i["player_id"], i["rank_change"]) for i in items] == [("ana", 1), ("bo", -1)]
    assert main(["boards", "player", *common, "--player", "bo", "--json"]) == 0
    assert orjson.loads(capsys.readouterr().out)["rank_change"] == -1
    assert main(["boards", "top", *common, "-n", "5"]) == 0
    table = capsys.readouterr().out
    assert "rank_change" in table or "+1" in table


@pytest.mark.parametrize("argv", [["--rank-change", "yes"]])
def test_the_option_takes_no_value(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["run", "--flow", "boards", "--input", "jsonl:/nonexistent", *argv])
    assert exited.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


def test_one_live_run_with_two_workers_answers_every_snapshots_rank_change(redis_url, redis_client, tmp_path):
    """One run following a growing log (no resume), two workers: the log arrives in pieces, each
    published before the next, and after each the answers are the model's since the board's
    previous change."""
    import random
    import threading
    import time

    from rankflow.connectors.redis_read import read_latest
    from rankflow.connectors.source_batch import STOP
    from tests.boards.test_boards_flow import random_log

    lines = random_log(random.Random(13), 120)
    path = tmp_path / "live.jsonl"
    path.write_bytes(b"")
    namespace = f"rc-{uuid.uuid4().hex[:10]}"
    opts = flow_options(redis_url, path, namespace, tmp_path, workers=2, until_eof=False, extra={"rank_change": True})
    failure: list[BaseException] = []

    def flow() -> None:
        try:
            run(opts)
        except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
            failure.append(exc)

    thread = threading.Thread(target=flow, name="rank-change-flow")
    thread.start()
    try:
        with open(path, "ab") as out:
            for end in range(20, len(lines) + 1, 20):
                out.write(b"".join(line + b"\n" for line in lines[end - 20:end]))
                out.flush()
                deadline = time.monotonic() + 60
                while (snap := read_latest(redis_client, boards_namespace(namespace))) is None \
                        or snap["positions"].get(str(path), 0) < end:
                    assert not failure and time.monotonic() < deadline, f"line {end} never published: {failure}"
                    time.sleep(0.005)
                stored = stored_positions(redis_client, namespace, path)
                check_answers(redis_client, namespace, expected_changes(lines[:end], stored, path))
    finally:
        STOP.set()
        thread.join(timeout=60)
    assert not failure, failure
