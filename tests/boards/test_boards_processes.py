"""The boards flow keyed by input partition (``--shard-by partition``): workers and processes
change nothing, and a durable resume with another number of workers is refused or exact.

A generated score log with chaos goes to a real broker keyed by ``player_id`` (4 partitions),
so each player's results are in one partition and the player shards follow the partitions
(``operators.keyed_shards.PartitionShardRouter``). Every run's boards, aliases and dead letters
must equal the reference model's, which is also what a one-worker run gives.
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from rankflow.connectors.board_read import read_aliases, read_boards
from rankflow.connectors.kafka import KafkaEndpoint
from rankflow.connectors.redis_keys import boards_namespace
from rankflow.connectors.redis_read import read_latest
from rankflow.errors import UsageError
from rankflow.generate_scores import ScoreChaos, generate_scores
from rankflow.options import RunOptions
from rankflow.produce import produce_file
from rankflow.recovery import LAYOUT_FILE
from rankflow.runner import run
from tests.boards_model import BoardsModel

KEY = bytes.fromhex("cd" * 32)
PARTITIONS = 4


@pytest.fixture(scope="module")
def score_topic(tmp_path_factory, kafka_brokers) -> tuple[str, list[bytes], BoardsModel]:
    """One log with chaos on a topic of 4 partitions, and its model (made once: runs only read it)."""
    log = tmp_path_factory.mktemp("scores") / "scores.jsonl"
    generate_scores(players=1_500, games=3, events=12_000, seed=23, out=log, key=KEY, days=10, chaos=ScoreChaos())
    lines = log.read_bytes().splitlines()
    model = BoardsModel(KEY)
    for offset, line in enumerate(lines):
        model.feed(line, "file", offset)
    topic = "scores-" + log.parent.name
    produce_file(str(log), KafkaEndpoint(kafka_brokers, topic), partitions=PARTITIONS, progress=False,
                 key_field="player_id")
    return topic, lines, model


def produce_lines(kafka_brokers: str, topic: str, lines: list[bytes], path: Path) -> None:
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    produce_file(str(path), KafkaEndpoint(kafka_brokers, topic), partitions=PARTITIONS, progress=False,
                 key_field="player_id")


def half_topic(kafka_brokers: str, lines: list[bytes], tmp: Path) -> tuple[str, int]:
    """A topic of its own holding the first 60% of ``lines``: a run stops there, the rest comes later."""
    topic, half = f"scores-{uuid.uuid4().hex[:8]}", len(lines) * 3 // 5
    produce_lines(kafka_brokers, topic, lines[:half], tmp / "first.jsonl")
    return topic, half


def run_topic(kafka_brokers: str, redis_url: str, topic: str, tmp: Path, **options: Any) -> str:
    namespace = options.pop("namespace", f"bp-{uuid.uuid4().hex[:10]}")
    options.setdefault("dead_letter", f"jsonl:{tmp / f'dead-{namespace}.jsonl'}")
    run(RunOptions(input=f"kafka:{kafka_brokers}/{topic}", until_eof=True, redis_url=redis_url, namespace=namespace,
                   flow="boards", signing_key=KEY, song_partitions=3, **options))
    return namespace


def assert_models(redis_client, namespace: str, model: BoardsModel, lines: list[bytes], dead: Path) -> None:
    assert read_boards(redis_client, namespace) == model.boards()
    assert read_aliases(redis_client, namespace) == {
        g: {k: v.split(":", 1)[1] for k, v in a.items()} for g, a in model.aliases().items()}
    final = read_latest(redis_client, boards_namespace(namespace))
    assert sum(final["positions"].values()) == len(lines)
    assert final["dead_letters"] == len(model.dead_letters) and final["duplicates"] == model.duplicates
    letters = [orjson.loads(x) for x in dead.read_bytes().splitlines()]
    assert Counter(d["reason"] for d in letters) == Counter(reason for reason, _, _ in model.dead_letters)
    assert len({(d["position"]["partition"], d["position"]["offset"]) for d in letters}) == len(letters)


@pytest.mark.parametrize(("workers", "processes", "shard_by"), [
    (1, 1, "partition"), (2, 1, "partition"), (1, 2, "partition"), (2, 2, "partition"), (3, 1, "user")])
def test_workers_and_processes_give_the_boards_of_one_worker(kafka_brokers, redis_url, redis_client, tmp_path,
                                                              score_topic, workers, processes, shard_by):
    topic, lines, model = score_topic
    dead = tmp_path / "dead.jsonl"
    namespace = run_topic(kafka_brokers, redis_url, topic, tmp_path, workers=workers, processes=processes,
                          user_shards=8, shard_by=shard_by, dead_letter=f"jsonl:{dead}", read_batch=1_000)
    assert_models(redis_client, namespace, model, lines, dead)


def test_a_durable_resume_with_another_worker_count_is_refused_keyed_by_partition(
        kafka_brokers, redis_url, redis_client, tmp_path, score_topic):
    """Keyed by input partition, a shard's key depends on the worker that reads its partition: a
    resume on another number of workers in all processes is one line (exit 2 on the command line),
    before anything is read, and so is one that changes the keying; on as many (one worker in each
    of two processes) it reads the rest of the topic and finishes exactly."""
    _, lines, model = score_topic
    topic, half = half_topic(kafka_brokers, lines, tmp_path)
    dead, recovery = tmp_path / "dead.jsonl", tmp_path / "recovery"
    common: dict[str, Any] = dict(user_shards=8, dead_letter=f"jsonl:{dead}", recovery_dir=str(recovery),
                                  read_batch=500, barrier_ms=20)
    namespace = run_topic(kafka_brokers, redis_url, topic, tmp_path, workers=2, **common)
    layout = orjson.loads((recovery / LAYOUT_FILE).read_bytes())
    assert layout["shard_by"] == "partition" and layout["workers_in_all"] == 2
    assert all(p.name.startswith("partition-") for p in (recovery / "user-changelog").glob("*.log"))
    produce_lines(kafka_brokers, topic, lines[half:], tmp_path / "rest.jsonl")
    with pytest.raises(UsageError, match="keyed by input partition on 2 workers in all processes, but this run "
                                         "has 1: resume with as many"):
        run_topic(kafka_brokers, redis_url, topic, tmp_path, namespace=namespace, workers=1, **common)
    with pytest.raises(UsageError, match="--shard-by partition: resume with the same options"):
        run_topic(kafka_brokers, redis_url, topic, tmp_path, namespace=namespace, workers=2, shard_by="user", **common)
    run_topic(kafka_brokers, redis_url, topic, tmp_path, namespace=namespace, workers=1, processes=2, **common)
    assert_models(redis_client, namespace, model, lines, dead)


def test_keyed_by_player_a_resume_rescales_exactly(kafka_brokers, redis_url, redis_client, tmp_path, score_topic):
    """A run stopped part-way (``--shard-by user``, two workers) resumed by three finishes with the
    model's boards: the player shards' keys do not depend on the workers."""
    _, lines, model = score_topic
    topic, half = half_topic(kafka_brokers, lines, tmp_path)
    dead, recovery = tmp_path / "dead.jsonl", tmp_path / "recovery"
    common: dict[str, Any] = dict(user_shards=8, shard_by="user", dead_letter=f"jsonl:{dead}",
                                  recovery_dir=str(recovery), read_batch=500, barrier_ms=20)
    namespace = run_topic(kafka_brokers, redis_url, topic, tmp_path, workers=2, **common)
    produce_lines(kafka_brokers, topic, lines[half:], tmp_path / "rest.jsonl")
    run_topic(kafka_brokers, redis_url, topic, tmp_path, namespace=namespace, workers=3, **common)
    assert_models(redis_client, namespace, model, lines, dead)


def test_the_reads_of_boards_two_processes_wrote_are_the_models(kafka_brokers, redis_url, redis_client, tmp_path,
                                                                  score_topic):
    """Pages by cursor, a player's page and percentile, the top P percent, the score at a
    percentile, tie styles and scoped ranks (docs/semantics/boards.md 5.1 to 5.4) of boards a run
    of two processes wrote with ``--rank-change``: the model's from the Redis reader, entries of a
    top with a rank change; the in-process mirror steps aside (it keeps no moves), so a service
    answers them from Redis too."""
    import asyncio
    import fractions

    from rankflow.connectors.board_read import BoardReader
    from tests import boards_model
    from tests.boards.test_board_pages import loaded_mirror, rows

    topic, lines, model = score_topic
    dead = tmp_path / "dead.jsonl"
    namespace = run_topic(kafka_brokers, redis_url, topic, tmp_path, workers=1, processes=2, user_shards=8,
                          shard_by="partition", dead_letter=f"jsonl:{dead}", read_batch=1_000,
                          extra={"rank_change": True})
    assert_models(redis_client, namespace, model, lines, dead)
    loop = asyncio.new_event_loop()
    mirror, client = loop.run_until_complete(loaded_mirror(redis_url, namespace))
    reader = BoardReader(redis_client, namespace)
    try:
        assert mirror.ready and mirror.rank_change and not mirror.serves
        for game, boards in sorted(model.boards().items()):
            for name in ("all", "best", min(b for b in boards if b.startswith("weekly:"))):
                entries, total = boards[name], len(boards[name])
                for ties in (None, "competition", "dense"):
                    expected = boards_model.styled(entries, ties)
                    seen, page = [], reader.top(game, name, 50, after="", ties=ties)
                    moved = 0
                    while True:
                        moved += sum("rank_change" in item for item in page["items"])
                        seen += rows(page["items"])
                        if "next" not in page:
                            break
                        page = reader.top(game, name, 50, after=page["next"], ties=ties)
                    assert seen == expected, (game, name, ties)
                    assert moved, (game, name)  # entries on the board before its last change carry one
                    for player, score, rank in expected[::97]:
                        mine = reader.player(game, name, player, ties=ties)
                        assert (mine["score"], mine["rank"], mine["percentile"]) == (
                            score, rank, boards_model.percentile(rank, total))
                        at = [row[0] for row in expected].index(player)
                        assert rows(reader.page(game, name, player, 20, ties=ties)["items"]) == \
                            expected[at - at % 20:at - at % 20 + 20]
                    for percent in ("0.5", "10", "99.99"):
                        exact = fractions.Fraction(percent)
                        part = reader.top(game, name, 100, percentile=percent, ties=ties)
                        assert rows(part["items"]) == boards_model.top_percent(entries, ties, exact, 100)
                        assert reader.score_for_percentile(game, name, percent, ties=ties)["score"] == \
                            boards_model.score_for_percentile(entries, ties, exact)
                    asked = [row[0] for row in entries[::53]] + ["nobody"]
                    scoped = reader.ranks(game, name, asked, ties=ties)
                    on, absent = boards_model.scoped(entries, asked, ties)
                    assert [(i["player_id"], i["score"], i["rank"], i["rank_in_set"]) for i in scoped["items"]] == [
                        (p, s, r, place) for p, s, r, _, place in on]
                    assert absent == ["nobody"]
    finally:
        loop.run_until_complete(client.aclose())
        loop.close()
