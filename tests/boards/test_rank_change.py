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

Section 5.6 (``since``): the model also gives each game's day start (the stored snapshot before the
first whose newest daily period is the current one) and each board's previous change's basis (the
stored snapshot before its last change): every read asked ``since=day-start`` or either id answers
the changes since that state, names it, and any other id is refused naming those two.
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
from rankflow.connectors.board_read import BoardReader, SinceNotRetained
from rankflow.connectors.redis_keys import boards_namespace
from rankflow.connectors.redis_read import read_history, read_latest
from rankflow.options import RunOptions
from rankflow.runner import run
from tests import boards_example as example
from tests.boards.test_boards_flow import HOUR, model_of, score_logs

Entries = list[tuple[str, int, int]]
Changes = dict[str, dict[str, dict[str, int | None]]]  # game -> board -> player -> rank change
Bases = dict[str, dict[str, dict[str, tuple[int | None, dict[str, int | None]]]]]
"""game -> board -> ``day`` / ``last`` -> (the basis's snapshot id or None, player -> rank change since it)"""


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


def stored_ids(client: redis.Redis, namespace: str) -> list[int]:
    """The id of each snapshot Redis stored, oldest first."""
    return [snap["snapshot_id"] for snap in read_history(client, boards_namespace(namespace))]


def expected_since(lines: list[bytes], stored: list[int], ids: list[int], path: Path) -> Bases:
    """Per board of the last stored snapshot, its day start's and its previous change's basis, each with
    the rank changes since it (docs/semantics/boards.md 5.6), from the model at every stored snapshot."""
    models = [model_of(lines[:n], example.KEY, str(path)) for n in stored]
    states: list[dict[str, dict[str, Entries]]] = [{}] + [model.boards() for model in models]
    days: list[dict[str, str]] = [{}] + [{game: a["daily"] for game, a in model.aliases().items()} for model in models]
    named: list[int | None] = [None, *ids]

    def since(i: int, now: Entries, game: str, board: str) -> dict[str, int | None]:
        then = {player: rank for rank, (player, _, _) in enumerate(states[i].get(game, {}).get(board, []))}
        return {player: then[player] - rank if player in then else None for rank, (player, _, _) in enumerate(now)}

    out: Bases = {}
    for game, boards in states[-1].items():
        first = min(i for i in range(1, len(days)) if days[i].get(game) == days[-1][game])
        for name, now in boards.items():
            seen = [state.get(game, {}).get(name, []) for state in states]
            last = max(i for i in range(1, len(seen)) if seen[i] != seen[i - 1])
            out.setdefault(game, {})[name] = {"day": (named[first - 1], since(first - 1, now, game, name)),
                                              "last": (named[last - 1], since(last - 1, now, game, name))}
    return out


def check_since(client: redis.Redis, namespace: str, want: Bases) -> None:
    """Every read asked ``since`` (the day start, or either basis's id) answers the model's changes and
    names the basis; an id of neither is refused, the message naming the day start."""
    reader = BoardReader(client, namespace)
    current = read_latest(client, boards_namespace(namespace))["snapshot_id"]
    for game, boards in want.items():
        for board, bases in boards.items():
            day_id = bases["day"][0]
            asks = [("day-start", *bases["day"])]
            asks += [(str(basis), basis, changes) for basis, changes in bases.values() if basis is not None]
            for since, basis, changes in asks:
                top = reader.top(game, board, 1000, since=since)
                assert (changes_of(top["items"]), top["since_snapshot_id"]) == (changes, basis), (game, board, since)
                assert changes_of(reader.top(game, board, 1000, since=since, ties="competition")["items"]) == changes
                paged = reader.top(game, board, 2, after="", since=since)
                seen = changes_of(paged["items"])
                while "next" in paged:
                    paged = reader.top(game, board, 2, after=paged["next"], since=since)
                    seen.update(changes_of(paged["items"]))
                assert seen == changes, (game, board, since)
                scoped = reader.ranks(game, board, [*reversed(changes), "nobody"], since=since)  # 5.4 with 5.6
                assert (changes_of(scoped["items"]), scoped["since_snapshot_id"]) == (changes, basis), (game, board)
                for player, change in changes.items():
                    answer = reader.player(game, board, player, since=since)
                    assert (answer.get("rank_change"), answer["since_snapshot_id"]) == (change, basis)
                    around = changes_of(reader.around(game, board, player, 1, since=since)["items"])
                    assert around == {p: changes[p] for p in around}, (game, board, player, since)
                    page = changes_of(reader.page(game, board, player, 3, since=since)["items"])
                    assert page == {p: changes[p] for p in page}, (game, board, player, since)
            other = next(i for i in range(current + 1, current + 5) if i not in {b for b, _ in bases.values()})
            with pytest.raises(SinceNotRetained, match="day-start") as refused:
                reader.top(game, board, 5, since=str(other))
            assert (f"snapshot {day_id}" if day_id is not None else "before the first snapshot") in str(refused.value)


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
            asked = [*reversed(changes), "nobody"]  # scoped ranks (5.4): each item's rank change, in any set
            assert changes_of(reader.ranks(game, board, asked)["items"]) == changes, (game, board)
            assert changes_of(reader.ranks(game, board, asked[::2], ties="dense")["items"]) == {
                p: changes[p] for p in asked[::2] if p in changes}, (game, board)
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
    check_since(redis_client, namespace, expected_since(lines, stored, stored_ids(redis_client, namespace), path))


@st.composite
def busy_days(draw: st.DrawFn) -> list[bytes]:
    """Logs whose days hold many results (an hour or less apart, a new day now and then), each its
    own match: players overtake each other several times a day."""
    t = example.ms("2027-01-03 20:00:00.000")
    lines = []
    for i in range(draw(st.integers(2, 30))):
        t += draw(st.sampled_from([1000, HOUR, HOUR, 3 * HOUR, 20 * HOUR]))
        lines.append(example.result(draw(st.sampled_from(["a", "b", "c"])), f"m{i}", draw(st.sampled_from([0, 10, 20, 50])),
                                    t, t + 1000, game=draw(st.sampled_from(["g1", "g1", "g2"]))))
    return lines


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=busy_days(), cuts=st.lists(st.integers(1, 30), min_size=2, max_size=8), shards=st.sampled_from([0, 2]))
def test_since_answers_the_model_over_many_snapshots_a_day(redis_url, redis_client, tmp_path, lines, cuts, shards):
    """Many stored snapshots a day: entries that move twice or more since their day start, boards
    unchanged since it, boards new on it (5.6), against the model."""
    from hypothesis import event

    ends = sorted({min(cut, len(lines)) for cut in cuts} | {len(lines)})
    namespace, path = executions(redis_url, tmp_path, lines, ends, user_shards=shards, extra={"rank_change": True})
    stored = stored_positions(redis_client, namespace, path)
    bases = expected_since(lines, stored, stored_ids(redis_client, namespace), path)
    event(f"a nonzero change since the day start: "
          f"{any(c not in (None, 0) for boards in bases.values() for b in boards.values() for c in b['day'][1].values())}")
    check_since(redis_client, namespace, bases)


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
    bases = expected_since(lines, stored, stored_ids(redis_client, namespace), path)
    assert any(change not in (None, 0) for boards in bases.values() for board in boards.values()
               for change in board["day"][1].values())
    check_since(redis_client, namespace, bases)


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
        scoped = reader.ranks("g1", board, [i["player_id"] for i in top["items"]])
        assert all("rank_change" not in item for item in scoped["items"]) and "since_snapshot_id" not in scoped
        assert "rank_change" not in reader.player("g1", board, top["items"][0]["player_id"])
    assert not redis_client.exists(f"{{{boards_namespace(namespace)}}}:g0:rank_change")
    with pytest.raises(SinceNotRetained, match="without --rank-change"):
        reader.top("g1", "all", 5, since="day-start")
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
    assert main(["boards", "ranks", *common, "--players", "bo,ana", "--json"]) == 0
    assert [(i["player_id"], i["rank_change"]) for i in orjson.loads(capsys.readouterr().out)["items"]] == [
        ("ana", 1), ("bo", -1)]
    assert main(["boards", "ranks", *common, "--players", "bo", "--since", "day-start", "--json"]) == 0
    assert orjson.loads(capsys.readouterr().out)["since_snapshot_id"] is None  # the day began with the first
    assert main(["boards", "ranks", *common, "--players", "bo,ana"]) == 0
    assert "+1" in capsys.readouterr().out


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
                check_since(redis_client, namespace,
                            expected_since(lines[:end], stored, stored_ids(redis_client, namespace), path))
    finally:
        STOP.set()
        thread.join(timeout=60)
    assert not failure, failure


def test_since_day_start_counts_from_the_board_before_the_days_first_snapshot(redis_url, redis_client, tmp_path,
                                                                               capsys):
    """A worked day (docs/semantics/boards.md 5.6): ana moves twice on the new day and still counts from
    the day start; the new day's board is all new, the day before's has not changed since (all 0)."""
    import orjson

    def result(player: str, match: str, points: int, at: str) -> bytes:
        return example.result(player, match, points, example.ms(at), example.ms(at) + 1000)

    pieces = [[result("ana", "m1", 10, "2027-01-04 10:00:00.000"), result("bo", "m1", 20, "2027-01-04 10:00:00.000"),
               result("cy", "m1", 30, "2027-01-04 10:00:00.000")],
              [result("dee", "m2", 5, "2027-01-05 09:00:00.000"), result("ana", "m2", 15, "2027-01-05 09:00:00.000")],
              [result("ana", "m3", 20, "2027-01-05 12:00:00.000"), result("bo", "m3", 1, "2027-01-05 12:00:00.000")]]
    path = tmp_path / "scores.jsonl"
    namespace = f"rc-{uuid.uuid4().hex[:10]}"
    opts = flow_options(redis_url, path, namespace, tmp_path, user_shards=2, recovery_dir=str(tmp_path / "r"),
                        extra={"rank_change": True})
    lines: list[bytes] = []
    day_start = None
    for piece in pieces:
        if lines and day_start is None:
            day_start = stored_ids(redis_client, namespace)[-1]  # the last snapshot before the new day's first
        lines += piece
        path.write_bytes(b"".join(line + b"\n" for line in lines))
        run(opts)
    reader = BoardReader(redis_client, namespace)
    top = reader.top("g1", "all", 10, since="day-start")
    assert [(i["player_id"], i.get("rank_change")) for i in top["items"]] == [
        ("ana", 2), ("cy", -1), ("bo", -1), ("dee", None)]
    assert top["since_snapshot_id"] == day_start
    assert reader.player("g1", "all", "ana", since=str(day_start))["rank_change"] == 2
    assert all("rank_change" not in i for i in reader.top("g1", "daily", 10, since="day-start")["items"])
    assert [i["rank_change"] for i in reader.top("g1", "daily:2027-01-04", 10, since="day-start")["items"]] == [0] * 3
    stored = stored_positions(redis_client, namespace, path)
    check_answers(redis_client, namespace, expected_changes(lines, stored, path))
    check_since(redis_client, namespace, expected_since(lines, stored, stored_ids(redis_client, namespace), path))
    common = ["--redis", redis_url, "--namespace", namespace, "--game", "g1", "--board", "all"]
    capsys.readouterr()
    assert main(["boards", "around", *common, "--player", "cy", "-r", "1", "--since", "day-start", "--json"]) == 0
    around = orjson.loads(capsys.readouterr().out)
    assert ([i.get("rank_change") for i in around["items"]], around["since_snapshot_id"]) == ([2, -1, -1], day_start)
    assert main(["boards", "top", *common, "--since", "day-start"]) == 0
    assert f"rank change since snapshot {day_start}" in capsys.readouterr().out
    assert main(["boards", "page", *common, "--player", "bo", "--since", "1"]) == 1
    err = capsys.readouterr().err
    assert f"day-start (snapshot {day_start})" in err and "Traceback" not in err


@pytest.mark.parametrize("argv, said", [
    (["top", "--board", "all", "--since", "yesterday"], "since must be day-start or a snapshot id"),
    (["player", "--board", "final:daily:2027-01-04", "--player", "ana", "--since", "day-start"],
     "final standings, which have no rank change"),
    (["around", "--board", "all", "--player", "ana", "--since", "-3"], "since must be"),
])
def test_a_bad_since_is_a_usage_error_before_redis(argv, said, capsys):
    # port 9 (discard): nothing listens there, so an answer other than the usage error would fail to connect
    assert main(["boards", argv[0], "--game", "g1", *argv[1:], "--redis", "redis://127.0.0.1:9/0"]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_durable_run_of_two_processes_answers_the_models_rank_change(redis_url, redis_client, tmp_path):
    """The moves kept by a run of two processes (``--processes 2``), resumed twice with more of the
    log: every read's rank change, and since the day start or a retained snapshot, is the model's
    at the snapshots the run stored."""
    import random

    from tests.boards.test_boards_flow import random_log

    lines = random_log(random.Random(29), 90)
    ends = [30, 60, 90]
    namespace, path = executions(redis_url, tmp_path, lines, ends, processes=2, extra={"rank_change": True})
    stored = stored_positions(redis_client, namespace, path)
    assert set(ends) <= set(stored)
    check_answers(redis_client, namespace, expected_changes(lines, stored, path))
    check_since(redis_client, namespace, expected_since(lines, stored, stored_ids(redis_client, namespace), path))
