"""The boards flow from Kafka: kill -9 at random moments, resume, and every board is exact.

A generated score log with chaos (duplicates, conflicts, bad signatures, late, too
old, in the future, malformed lines) goes to a real broker keyed by ``player_id``.
The flow runs with a recovery directory and is killed with SIGKILL several times
while it publishes, then run to the end: every board must equal the reference
model's, every dead letter must be written exactly once, and no snapshot may go
back in time.
"""

from __future__ import annotations

import hashlib
import os
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


@pytest.fixture(scope="module")
def chaos_topic(tmp_path_factory, kafka_brokers) -> tuple[str, list[bytes], BoardsModel, dict]:
    """One generated score log with chaos on a topic, its model and the model's boards: the same for
    every layout below, so made once (a run only reads the topic; each has its own recovery dir)."""
    log = tmp_path_factory.mktemp("chaos") / "scores.jsonl"
    generate_scores(players=3_000, games=3, events=60_000, seed=5, out=log, key=KEY, days=10,
                    chaos=ScoreChaos())
    lines = log.read_bytes().splitlines()
    model = BoardsModel(KEY)
    for offset, line in enumerate(lines):
        model.feed(line, "file", offset)
    topic = "scores-" + log.parent.name
    produce_file(str(log), KafkaEndpoint(kafka_brokers, topic), partitions=3, progress=False, key_field="player_id")
    return topic, lines, model, model.boards()


@pytest.mark.parametrize("shards,compact_bytes", [
    ("0", None),  # one key per player: Bytewax stores every touched record
    ("8", None),  # player shards: changelogs of the pieces of records that changed
    ("8", "3000"),  # ... compacting into new generations (whole records) all the time
])
def test_boards_survive_kill_9_and_resume_exactly(tmp_path, kafka_brokers, chaos_topic, redis_url, redis_client,
                                                  namespace, shards, compact_bytes, monkeypatch):
    topic, lines, model, boards = chaos_topic
    dead = tmp_path / "dead.jsonl"
    command = [*RANKFLOW, "run", "--flow", "boards", "--signing-key", KEY.hex(),
               "--input", f"kafka:{kafka_brokers}/{topic}", "--until-eof", "--redis", redis_url,
               "--namespace", namespace, "--dead-letter", f"jsonl:{dead}", "--recovery-dir", str(tmp_path / "rec"),
               "--barrier-ms", "50", "--partitions", "4", "--user-shards", shards,
               "--read-batch", "2000"]  # small batches: many barriers in this small log, so kills land mid-way
    if compact_bytes is not None:
        monkeypatch.setenv("RANKFLOW_CHANGELOG_MIN_BYTES", compact_bytes)
    kills = kill_9_while_publishing(command, lambda: progress(redis_client, namespace), random.Random(9), 3, len(lines))
    assert kills >= 2, "the flow finished before it could be killed twice: make the log bigger"

    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    final = read_latest(redis_client, boards_namespace(namespace))
    assert sum(final["positions"].values()) == len(lines)
    got, expected = read_boards(redis_client, namespace), boards
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


def _forged(line: bytes) -> bytes:
    """A result whose points were raised after it was signed: its signature no longer matches."""
    result = orjson.loads(line)
    return orjson.dumps({**result, "match_id": result["match_id"] + "-forged", "points": result["points"] + 1})


def test_a_resume_must_keep_its_signing_key(tmp_path, redis_url, redis_client, namespace, monkeypatch):
    """The recovery directory stores a fingerprint of the key (never the key): a resume that
    drops it would count forged results, one with another key would refuse the real ones."""
    monkeypatch.delenv("RANKFLOW_SIGNING_KEY", raising=False)
    log, rec, dead = tmp_path / "scores.jsonl", tmp_path / "rec", tmp_path / "dead.jsonl"
    generate_scores(players=40, games=2, events=400, seed=3, out=log, key=KEY, clean=True)
    lines = log.read_bytes().splitlines()
    log.write_bytes(b"".join(line + b"\n" for line in lines[:200]))
    command = [*RANKFLOW, "run", "--flow", "boards", "--input", f"jsonl:{log}", "--until-eof", "--redis", redis_url,
               "--namespace", namespace, "--dead-letter", f"jsonl:{dead}", "--recovery-dir", str(rec)]
    first = subprocess.run([*command, "--signing-key", KEY.hex()], capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    assert "no signing key" not in first.stderr
    rest = [*lines[200:], _forged(lines[0])]
    with log.open("ab") as f:
        f.write(b"".join(line + b"\n" for line in rest))
    stored = (rec / "rankflow-layout.json").read_bytes()
    assert KEY.hex().encode() not in stored.lower() and hashlib.sha256(KEY).hexdigest().encode() not in stored
    assert KEY not in stored
    def published() -> tuple:
        keys = sorted(redis_client.keys(f"*{namespace}*"))
        return read_latest(redis_client, boards_namespace(namespace)), keys, [redis_client.dump(k) for k in keys]

    before = published()

    other = bytes.fromhex("cd" * 32)
    for how, extra, env in (("dropped", [], {}), ("changed", ["--signing-key", other.hex()], {}),
                            ("changed", [], {"RANKFLOW_SIGNING_KEY": other.hex()}),
                            ("dropped", ["--processes", "2"], {})):  # refused before the processes start
        r = subprocess.run([*command, *extra], capture_output=True, text=True, timeout=120, env={**os.environ, **env})
        assert r.returncode == 2, (how, r.stderr)
        assert r.stderr.count("\n") == 1 and "signing key" in r.stderr and how in r.stderr, r.stderr
        assert other.hex() not in r.stderr
        assert published() == before, "refused before claiming the namespace"
    assert (rec / "rankflow-layout.json").read_bytes() == stored

    again = subprocess.run(command, capture_output=True, text=True, timeout=120,
                           env={**os.environ, "RANKFLOW_SIGNING_KEY": KEY.hex()})  # the same key, from the variable
    assert again.returncode == 0, again.stderr
    model = BoardsModel(KEY)
    for offset, line in enumerate([*lines, rest[-1]]):
        model.feed(line, "file", offset)
    assert read_boards(redis_client, namespace) == model.boards()
    letters = [orjson.loads(x) for x in dead.read_bytes().splitlines()]
    assert [d["reason"] for d in letters] == ["bad_signature"]


def test_a_recovery_directory_from_before_key_fingerprints(tmp_path, redis_url, redis_client, namespace, monkeypatch):
    """A directory written without the fingerprint cannot tell whether its run checked
    signatures: a resume without a key is refused, a resume with one is taken and recorded."""
    monkeypatch.delenv("RANKFLOW_SIGNING_KEY", raising=False)
    log, rec = tmp_path / "scores.jsonl", tmp_path / "rec"
    generate_scores(players=20, games=1, events=100, seed=4, out=log, key=KEY, clean=True)
    command = [*RANKFLOW, "run", "--flow", "boards", "--input", f"jsonl:{log}", "--until-eof", "--redis", redis_url,
               "--namespace", namespace, "--dead-letter", f"jsonl:{tmp_path / 'dead.jsonl'}",
               "--recovery-dir", str(rec)]
    assert subprocess.run([*command, "--signing-key", KEY.hex()], capture_output=True, timeout=120).returncode == 0
    layout_file = rec / "rankflow-layout.json"
    layout = orjson.loads(layout_file.read_bytes())
    older = {k: v for k, v in layout.items() if "sign" not in k and k != "format"}  # an older version's: no format
    layout_file.write_bytes(orjson.dumps(older))
    r = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--signing-key" in r.stderr, r.stderr
    r = subprocess.run([*command, "--signing-key", KEY.hex()], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert orjson.loads(layout_file.read_bytes()) == layout, "the fingerprint is recorded from now on"


def test_a_boards_run_without_a_key_says_so(tmp_path, redis_url, namespace, monkeypatch):
    monkeypatch.delenv("RANKFLOW_SIGNING_KEY", raising=False)
    log, rec = tmp_path / "scores.jsonl", tmp_path / "rec"
    generate_scores(players=20, games=1, events=50, seed=4, out=log, clean=True)
    command = [*RANKFLOW, "run", "--flow", "boards", "--input", f"jsonl:{log}", "--until-eof", "--redis", redis_url,
               "--namespace", namespace, "--dead-letter", f"jsonl:{tmp_path / 'dead.jsonl'}",
               "--recovery-dir", str(rec)]
    r = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert len([x for x in r.stderr.splitlines() if "no signing key" in x]) == 1, r.stderr
    again = subprocess.run(command, capture_output=True, text=True, timeout=120)  # keyless, resumed keyless
    assert again.returncode == 0, again.stderr
    r = subprocess.run([*command, "--signing-key", KEY.hex()], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "signing key" in r.stderr and "added" in r.stderr, r.stderr
