"""The boards flow end to end: the worked example, random logs against the model, every snapshot.

The flow runs in-process on a JSON Lines log (Kafka: ``test_boards_kafka.py``),
publishes into a real Redis, and everything is read back the way readers read it
(``connectors.board_read``): whole boards, ranks, aliases, dead letters.
"""

from __future__ import annotations

import random
from collections import Counter
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rankflow.connectors.board_read import BoardReader, NoSuchBoard, NotOnBoard, read_aliases, read_boards
from rankflow.connectors.redis_generations import current_generation
from rankflow.connectors.redis_keys import Keys, boards_namespace
from rankflow.connectors.redis_read import read_latest
from rankflow.connectors.source_batch import STOP
from rankflow.options import RunOptions, ServiceError
from rankflow.cli import main
from rankflow.rebuild import rebuild
from rankflow.runner import run
from tests import boards_example as example, boards_model as model
from tests.boards_model import BoardsModel, rank_and_competition
from tests.snapshot_stamp import stamped, stored_published_at


def run_boards(redis_url: str, tmp: Path, lines: list[bytes], **options: Any) -> dict[str, Any]:
    path = tmp / f"scores-{uuid.uuid4().hex[:6]}.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    dead = tmp / f"dead-{uuid.uuid4().hex[:6]}.jsonl"
    namespace = options.pop("namespace", f"b-{uuid.uuid4().hex[:10]}")
    final = run(RunOptions(input=f"jsonl:{path}", until_eof=True, redis_url=redis_url, namespace=namespace,
                           dead_letter=f"jsonl:{dead}", flow="boards", **options))
    assert final is not None
    return {"final": final, "namespace": namespace, "path": str(path),
            "dead": [orjson.loads(line) for line in dead.read_bytes().splitlines()] if dead.exists() else []}


def model_of(lines: list[bytes], key: bytes | None, partition: str) -> BoardsModel:
    model = BoardsModel(key)
    for offset, line in enumerate(lines):
        model.feed(line, partition, offset)
    return model


def test_the_worked_example_of_boards_md(redis_url, redis_client, tmp_path):
    out = run_boards(redis_url, tmp_path, example.LINES, signing_key=example.KEY, song_partitions=3)
    reader = BoardReader(redis_client, out["namespace"])
    sid = out["final"]["snapshot_id"]
    at = stored_published_at(redis_client, boards_namespace(out["namespace"]))
    for board, expected in example.BOARDS.items():
        top = reader.top("g1", board, 1000)
        assert top["snapshot_id"] == sid and top["total_players"] == len(expected)
        assert [(i["player_id"], i["score"], i["rank"], i["competition_rank"]) for i in top["items"]] == expected
        for player, score, rank, competition in expected:
            answer = reader.player("g1", board, player)
            assert answer.pop("percentile") == model.percentile(rank, len(expected))  # boards.md 5.2
            assert stamped(answer, at) == {
                "snapshot_id": sid, "published_at": at, "game_id": "g1", "board": board, "player_id": player, "score": score,
                "rank": rank, "competition_rank": competition}
    for alias, board in example.ALIASES.items():
        assert reader.top("g1", alias, 10)["board"] == board
        assert reader.player("g1", alias, "cy")["board"] == board
    around = reader.around("g1", "all", "eve", 1)
    assert [(i["player_id"], i["rank"], i["competition_rank"]) for i in around["items"]] == [("dee", 4, 1), ("eve", 5, 5)]
    assert around["board"] == "all" and around["snapshot_id"] == sid
    with pytest.raises(NotOnBoard):
        reader.player("g1", "daily:2027-01-03", "ana")
    with pytest.raises(NoSuchBoard):
        reader.top("g1", "daily:2027-01-05", 10)
    with pytest.raises(NoSuchBoard):
        reader.top("g2", "all", 10)
    assert sorted(d["reason"] for d in out["dead"]) == ["bad_signature", "conflict"]
    assert {d["position"]["offset"] for d in out["dead"]} == {6, 8}
    assert out["final"]["dead_letters"] == 2
    assert out["final"]["dead_letters_by_reason"] == {"bad_signature": 1, "conflict": 1}
    assert out["final"]["duplicates"] == 1
    assert read_aliases(redis_client, out["namespace"]) == {"g1": {"daily": "2027-01-04", "weekly": "2027-W01"}}


def test_reached_at_orders_the_ties_on_all(redis_url, redis_client, tmp_path):
    out = run_boards(redis_url, tmp_path, example.LINES, signing_key=example.KEY)
    boards = read_boards(redis_client, out["namespace"])
    assert {p: at for p, _, at in boards["g1"]["all"]} == example.REACHED_ON_ALL


@pytest.mark.parametrize("partitions,shards", [(1, 1), (4, 0), (5, 16)])
def test_random_logs_match_the_model(redis_url, redis_client, tmp_path, partitions, shards):
    lines = random_log(random.Random(partitions * 100 + shards), 600)
    out = run_boards(redis_url, tmp_path, lines, signing_key=example.KEY, song_partitions=partitions,
                     user_shards=shards, k_max=3)
    model = model_of(lines, example.KEY, out["path"])
    assert read_boards(redis_client, out["namespace"]) == model.boards()
    assert sorted((d["reason"], d["position"]["offset"]) for d in out["dead"]) == sorted(
        (reason, offset) for reason, _, offset in model.dead_letters)
    reader = BoardReader(redis_client, out["namespace"])
    for game, boards in model.boards().items():
        for board, entries in boards.items():
            for player, _, rank, competition in rank_and_competition(entries)[:40]:
                got = reader.player(game, board, player)
                assert (got["rank"], got["competition_rank"]) == (rank, competition)
    expected_aliases = {g: {k: v.split(":", 1)[1] for k, v in a.items()} for g, a in model.aliases().items()}
    assert read_aliases(redis_client, out["namespace"]) == expected_aliases
    snap = out["final"]
    assert snap["dead_letters"] == len(model.dead_letters)
    assert snap["duplicates"] == model.duplicates
    assert snap["dead_letters_by_reason"] == dict(Counter(reason for reason, _, _ in model.dead_letters))


def test_every_snapshot_holds_exactly_the_input_before_its_positions(redis_url, redis_client, tmp_path):
    """One line per barrier (the flow follows a growing file): after each line, every board in
    Redis is the model's for exactly the lines before the published position."""
    lines = random_log(random.Random(7), 70)
    path = tmp_path / "stepwise.jsonl"
    path.write_bytes(b"")
    namespace = f"b-{uuid.uuid4().hex[:10]}"
    opts = RunOptions(input=f"jsonl:{path}", redis_url=redis_url, namespace=namespace, flow="boards",
                      dead_letter=f"jsonl:{tmp_path / 'dead.jsonl'}", signing_key=example.KEY, song_partitions=3)
    failure: list[BaseException] = []
    thread = threading.Thread(target=lambda: _run_into(opts, failure), name="boards-flow")
    thread.start()
    model = BoardsModel(example.KEY)
    try:
        with open(path, "ab") as out:
            for n, line in enumerate(lines, start=1):
                out.write(line + b"\n")
                out.flush()
                model.feed(line, str(path), n - 1)
                deadline = time.monotonic() + 60
                while (snap := read_latest(redis_client, boards_namespace(namespace))) is None \
                        or snap["positions"][str(path)] < n:
                    assert not failure and time.monotonic() < deadline, f"line {n} never published: {failure}"
                    time.sleep(0.005)
                assert read_boards(redis_client, namespace) == model.boards(), f"after line {n}"
    finally:
        STOP.set()
        thread.join(timeout=60)
    assert not failure, failure


def _run_into(opts: RunOptions, failure: list[BaseException]) -> None:
    try:
        run(opts)
    except BaseException as exc:  # noqa: BLE001 - reported by the test thread
        failure.append(exc)


def random_log(rng: random.Random, n: int) -> list[bytes]:
    """Few players, games and days, so ties, duplicates, conflicts and day and week
    boundaries (the 2026/2027 year end) are everywhere; a few bad lines."""
    t0 = example.ms("2026-12-31 20:00:00.000")
    players = [f"p{i}" for i in range(12)] + ["é", "🎮"]
    lines: list[bytes] = []
    sent: list[tuple[str, str, str, int, int]] = []
    clock = t0
    for i in range(n):
        clock += rng.choice([0, 1000, 60_000, 3_600_000, 7_200_000])
        roll = rng.random()
        if roll < 0.1 and sent:  # a resubmission, or a conflict
            game, match, player, points, played = rng.choice(sent)
            if rng.random() < 0.5:
                points = rng.choice([0, 10, 20])
            lines.append(example.result(player, match, points, played, clock, game=game))
            continue
        if roll < 0.13:
            lines.append(rng.choice([b"{", b"[]", b'{"game_id": "g1"}', b'{"game_id": 1, "match_id": "m", '
                                     b'"player_id": "p", "points": 1, "played_at": 1, "received_at": 1}']))
            continue
        game = rng.choice(["g1", "g1", "g2"])
        player = rng.choice(players)
        played = clock - rng.choice([0, 0, 1000, 3_600_000, 30 * 3_600_000])  # some too old
        if rng.random() < 0.02:
            played = clock + 120_000  # in the future
        points = rng.choice([0, 10, 10, 20, 30, 50])
        match = f"m{i}"
        forged = rng.random() < 0.03
        lines.append(example.result(player, match, points, played, clock, game=game,
                                    signed_points=points + 1 if forged else None))
        sent.append((game, match, player, points, played))
    return lines


def test_a_resumed_run_republishes_every_board_when_redis_lost_them(redis_url, redis_client, tmp_path):
    """Redis loses its data while the run is down: the resumed run (player shards with
    changelogs) sends every player's entries again, and the boards are whole and exact."""
    lines = random_log(random.Random(11), 300)
    first, second = lines[:200], lines[200:]
    path = tmp_path / "scores.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in first))
    namespace = f"b-{uuid.uuid4().hex[:10]}"
    opts = dict(input=f"jsonl:{path}", until_eof=True, redis_url=redis_url, namespace=namespace, flow="boards",
                dead_letter=f"jsonl:{tmp_path / 'dead.jsonl'}", signing_key=example.KEY, song_partitions=3,
                user_shards=4, recovery_dir=str(tmp_path / "recovery"))
    run(RunOptions(**opts))
    for key in redis_client.scan_iter(f"{{{boards_namespace(namespace)}}}:*"):
        redis_client.delete(key)  # Redis lost everything of this namespace
    with open(path, "ab") as out:
        out.write(b"".join(line + b"\n" for line in second))
    run(RunOptions(**opts))
    model = model_of(lines, example.KEY, str(path))
    assert read_boards(redis_client, namespace) == model.boards()
    assert read_aliases(redis_client, namespace) == {
        g: {k: v.split(":", 1)[1] for k, v in a.items()} for g, a in model.aliases().items()}


def test_without_player_shards_a_lost_redis_is_a_clear_error(redis_url, redis_client, tmp_path):
    path = tmp_path / "scores.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in example.LINES[:4]))
    namespace = f"b-{uuid.uuid4().hex[:10]}"
    opts = dict(input=f"jsonl:{path}", until_eof=True, redis_url=redis_url, namespace=namespace, flow="boards",
                dead_letter=f"jsonl:{tmp_path / 'dead.jsonl'}", signing_key=example.KEY, user_shards=0,
                recovery_dir=str(tmp_path / "recovery"))
    run(RunOptions(**opts))
    for key in redis_client.scan_iter(f"{{{boards_namespace(namespace)}}}:*"):
        redis_client.delete(key)
    with pytest.raises(ServiceError, match="cannot send every board again"):
        run(RunOptions(**opts))


def test_a_rebuild_replays_into_a_new_generation_and_switches(redis_url, redis_client, tmp_path):
    lines = random_log(random.Random(5), 250)
    out = run_boards(redis_url, tmp_path, lines[:150], signing_key=example.KEY)
    namespace, path = out["namespace"], out["path"]
    with open(path, "ab") as f:
        f.write(b"".join(line + b"\n" for line in lines[150:]))
    old = current_generation(redis_client, boards_namespace(namespace))
    old_keys = Keys(boards_namespace(namespace), old)
    final = rebuild(RunOptions(input=f"jsonl:{path}", redis_url=redis_url, namespace=namespace, flow="boards",
                               dead_letter=f"jsonl:{tmp_path / 'rebuild-dead.jsonl'}", signing_key=example.KEY))
    assert sum(final["positions"].values()) == len(lines)
    assert current_generation(redis_client, boards_namespace(namespace)) != old
    assert read_boards(redis_client, namespace) == model_of(lines, example.KEY, path).boards()
    assert not redis_client.exists(old_keys.boards, old_keys.aliases, *old_keys.board("g1", "all")), \
        "the old generation's boards are gone"


HOUR = 3_600_000


@st.composite
def score_logs(draw: st.DrawFn) -> list[bytes]:
    """Short logs over few players, games and matches, across the 2026/2027 year end:
    resubmissions, conflicts, forged signatures, late and early results, zeros."""
    t = example.ms("2026-12-31 22:00:00.000")
    lines: list[bytes] = []
    for _ in range(draw(st.integers(1, 40))):
        t += draw(st.sampled_from([0, 1000, HOUR, 6 * HOUR, 30 * HOUR]))
        player = draw(st.sampled_from(["a", "b", "c", "é"]))
        match = f"m{draw(st.integers(0, 6))}"
        game = draw(st.sampled_from(["g1", "g2"]))
        points = draw(st.sampled_from([0, 10, 20, 50]))
        played = t - draw(st.sampled_from([0, 1, HOUR, 23 * HOUR, 25 * HOUR])) + draw(st.sampled_from([0, 0, 61_000]))
        forged = draw(st.booleans()) and draw(st.booleans()) and draw(st.booleans())
        lines.append(example.result(player, match, points, played, t, game=game,
                                    signed_points=points + 1 if forged else None))
    return lines


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=score_logs(), partitions=st.integers(1, 3), shards=st.sampled_from([0, 2]))
def test_any_score_log_gives_the_models_boards(redis_url, redis_client, tmp_path, lines, partitions, shards):
    out = run_boards(redis_url, tmp_path, lines, signing_key=example.KEY, song_partitions=partitions,
                     user_shards=shards)
    model = model_of(lines, example.KEY, out["path"])
    assert read_boards(redis_client, out["namespace"]) == model.boards()
    assert sorted((d["reason"], d["position"]["offset"]) for d in out["dead"]) == sorted(
        (reason, offset) for reason, _, offset in model.dead_letters)


def test_the_boards_cli_answers_and_exit_statuses(redis_url, tmp_path, capsysbinary):
    out = run_boards(redis_url, tmp_path, example.LINES, signing_key=example.KEY)
    common = ["--redis", redis_url, "--namespace", out["namespace"], "--game", "g1"]
    capsysbinary.readouterr()
    assert main(["boards", "top", *common, "--board", "weekly", "--n", "2", "--json"]) == 0
    top = orjson.loads(capsysbinary.readouterr().out)
    at = stored_published_at(redis.Redis.from_url(redis_url), boards_namespace(out["namespace"]))
    assert list(top)[:3] == ["snapshot_id", "published_at", "age_ms"]
    top = stamped(top, at)  # the publication Redis holds for the snapshot, and an age
    assert top["board"] == "weekly:2027-W01" and top["total_players"] == 3
    assert [(i["player_id"], i["rank"], i["competition_rank"], i["score"]) for i in top["items"]] == [
        ("cy", 1, 1, 50), ("dee", 2, 1, 50)]
    assert main(["boards", "player", *common, "--board", "best", "--player", "bo", "--json"]) == 0
    assert stamped(orjson.loads(capsysbinary.readouterr().out), at)["competition_rank"] == 4
    assert main(["boards", "around", *common, "--board", "all", "--player", "ana", "--r", "1", "--json"]) == 0
    assert [i["player_id"] for i in stamped(orjson.loads(capsysbinary.readouterr().out), at)["items"]] == ["ana", "bo"]
    assert main(["boards", "player", *common, "--board", "daily:2027-01-03", "--player", "ana"]) == 1
    assert b"not on" in capsysbinary.readouterr().err
    assert main(["boards", "top", *common, "--board", "daily:2026-01-01"]) == 1
    assert b"no board 'daily:2026-01-01' in game 'g1'; its boards: all, best, " in capsysbinary.readouterr().err
    for bad in (["--n", "0"], ["--n", "1001"]):
        assert main(["boards", "top", *common, "--board", "all", *bad]) == 2
        assert b"between 1 and 1000" in capsysbinary.readouterr().err
    assert main(["boards", "around", *common, "--board", "all", "--player", "ana", "--r", "51"]) == 2
    assert main(["boards", "top", *common, "--board", "monthly"]) == 2
    assert main(["boards", "top", *common, "--board", "all"]) == 0  # a table
    assert b"ana" in capsysbinary.readouterr().out
