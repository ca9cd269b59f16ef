"""The boards flow from Kafka: kill -9 at random moments, resume, and every board is exact.

A generated score log with chaos (duplicates, conflicts, bad signatures, late, too
old, in the future, malformed lines) goes to a real broker keyed by ``player_id``.
The flow runs with a recovery directory and is killed with SIGKILL several times
while it publishes, then run to the end: every board must equal the reference
model's, every dead letter must be written exactly once, and no snapshot may go
back in time.
"""

from __future__ import annotations

import random
import subprocess
import sys
from collections import Counter

import orjson
import pytest
import redis

from rankflow.connectors.board_read import read_aliases, read_boards
from rankflow.connectors.kafka import KafkaEndpoint
from rankflow.connectors.redis_keys import boards_namespace
from rankflow.connectors.redis_read import read_history, read_latest
from rankflow.generate_scores import ScoreChaos, generate_scores
from rankflow.produce import produce_file
from tests.boards_model import BoardsModel
from tests.crashes import kill_9_while_publishing

RANKFLOW = [sys.executable, "-m", "rankflow.cli"]
KEY = bytes.fromhex("ab" * 32)


def progress(client: redis.Redis, namespace: str) -> int:
    snap = read_latest(client, boards_namespace(namespace))
    return sum(snap["positions"].values()) if snap else -1


@pytest.mark.parametrize("shards,compact_bytes", [
    ("0", None),  # one key per player: Bytewax stores every touched record
    ("8", None),  # player shards: changelogs of the pieces of records that changed
    ("8", "3000"),  # ... compacting into new generations (whole records) all the time
])
def test_boards_survive_kill_9_and_resume_exactly(tmp_path, kafka_brokers, topic, redis_url, redis_client, namespace,
                                                  shards, compact_bytes, monkeypatch):
    log = tmp_path / "scores.jsonl"
    generate_scores(players=3_000, games=3, events=60_000, seed=5, out=log, key=KEY, days=10,
                    chaos=ScoreChaos())
    lines = log.read_bytes().splitlines()
    model = BoardsModel(KEY)
    for offset, line in enumerate(lines):
        model.feed(line, "file", offset)
    produce_file(str(log), KafkaEndpoint(kafka_brokers, topic), partitions=3, progress=False, key_field="player_id")

    dead = tmp_path / "dead.jsonl"
    command = [*RANKFLOW, "run", "--flow", "boards", "--signing-key", KEY.hex(),
               "--input", f"kafka:{kafka_brokers}/{topic}", "--until-eof", "--redis", redis_url,
               "--namespace", namespace, "--dead-letter", f"jsonl:{dead}", "--recovery-dir", str(tmp_path / "rec"),
               "--barrier-ms", "50", "--partitions", "4", "--user-shards", shards]
    if compact_bytes is not None:
        monkeypatch.setenv("RANKFLOW_CHANGELOG_MIN_BYTES", compact_bytes)
    kills = kill_9_while_publishing(command, lambda: progress(redis_client, namespace), random.Random(9), 3, 0.5)
    assert kills >= 2, "the flow finished before it could be killed twice: make the log bigger"

    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    final = read_latest(redis_client, boards_namespace(namespace))
    assert sum(final["positions"].values()) == len(lines)
    got, expected = read_boards(redis_client, namespace), model.boards()
    assert got == expected, board_differences(got, expected)
    assert read_aliases(redis_client, namespace) == {
        g: {k: v.split(":", 1)[1] for k, v in a.items()} for g, a in model.aliases().items()}
    letters = [orjson.loads(x) for x in dead.read_bytes().splitlines()]
    assert Counter(d["reason"] for d in letters) == Counter(reason for reason, _, _ in model.dead_letters)
    assert len({(d["position"]["partition"], d["position"]["offset"]) for d in letters}) == len(letters)
    assert final["dead_letters"] == len(model.dead_letters)

    if compact_bytes is not None:
        logs = list((tmp_path / "rec" / "user-changelog").glob("*.log"))
        assert max(int(p.name.rsplit(".g", 1)[1][:-4]) for p in logs) >= 2, "changelogs moved to new generations"

    history = read_history(redis_client, boards_namespace(namespace))
    assert len({s["run"] for s in history}) >= 3, "snapshots of several executions"
    seen: dict[str, int] = {}
    last_said: dict[tuple[str, str], dict] = {}  # what the last snapshot naming a board said of it
    for snap in history:
        assert snap["errors"] == []
        for part, offset in snap["positions"].items():
            assert offset >= seen.get(part, 0), "a published snapshot went back in time"
            seen[part] = offset
        for game, boards in snap["changed_boards"].items():
            last_said.update({(game, board): said for board, said in boards.items()})
    for (game, board), said in last_said.items():  # the counters' tops and player counts survived the kills
        entries = expected.get(game, {}).get(board)
        if entries is not None:  # not dropped by retention since
            assert said["total_players"] == len(entries), (game, board)
            assert [(i["player_id"], i["score"], i["reached_at"]) for i in said["top"]] == entries[:len(said["top"])]


def board_differences(got: dict, expected: dict) -> str:
    """What differs, board by board: a readable failure instead of two huge dicts."""
    lines = []
    for game in sorted(set(got) | set(expected)):
        for board in sorted(set(got.get(game, {})) | set(expected.get(game, {}))):
            x, y = got.get(game, {}).get(board), expected.get(game, {}).get(board)
            if x == y:
                continue
            if x is None or y is None:
                lines.append(f"{game}/{board}: flow {'has no board' if x is None else len(x)}, "
                             f"model {'has no board' if y is None else len(y)}")
                continue
            dx, dy = {p: (s, a) for p, s, a in x}, {p: (s, a) for p, s, a in y}
            diff = sorted((p, dx.get(p), dy.get(p)) for p in set(dx) | set(dy) if dx.get(p) != dy.get(p))
            lines.append(f"{game}/{board}: {len(diff)} entries differ (flow, model), e.g. {diff[:3]}"
                         + ("" if diff else " (only the order differs)"))
    return "\n".join(lines)
