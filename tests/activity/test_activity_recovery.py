"""The activity flow from Kafka: several partitions, kill -9 at random moments, resume, rebuild.

A random message log (a few late and far-late events, malformed lines) goes to a real
broker keyed by ``workspace_id`` over three partitions. The flow runs with a recovery
directory and is killed with SIGKILL while it publishes, then run to the end: every
workspace's ranking must be the model's (docs/semantics/windows.md: with several partitions the final
counts do not depend on the interleaving), every dead letter written exactly once, no
snapshot back in time. A rebuild from the topic then gives the same rankings.
"""

from __future__ import annotations

import random
import subprocess
import sys
from collections import Counter

import orjson
import pytest
import redis
from confluent_kafka import Consumer, KafkaError, TopicPartition

from rankflow.connectors.activity_read import ActivityReader
from rankflow.connectors.kafka import KafkaEndpoint, topic_partitions
from rankflow.connectors.redis_generations import current_generation
from rankflow.connectors.redis_keys import Keys, activity_namespace
from rankflow.connectors.redis_read import read_history, read_latest
from rankflow.produce import produce_file
from rankflow.state.message_events import parse_message
from tests.crashes import kill_9_while_publishing
from tests.activity.test_window_rules import check_summary_items
from tests.window_model import global_ranking, run_model, workspace_ranking

RANKFLOW = [sys.executable, "-m", "rankflow.cli"]


def message_log(n: int, seed: int) -> list[bytes]:
    rnd = random.Random(seed)
    lines, t = [], 1_800_000_000_000
    for _ in range(n):
        t += rnd.randrange(0, 40)
        ts = t - rnd.randrange(0, 30_000) if rnd.random() < 0.2 else t
        if rnd.random() < 0.01:
            ts = t - rnd.randrange(300_000, 900_000)  # far late: expired
        event = {"workspace_id": f"w{min(int(rnd.paretovariate(1.2)), 40)}",
                 "channel_id": f"c{min(int(rnd.paretovariate(1.0)), 60)}", "user_id": f"u{rnd.randrange(50)}", "ts": ts}
        line = orjson.dumps(event)
        if rnd.random() < 0.005:
            line = rnd.choice([b"", b"{", orjson.dumps({**event, "ts": -1}), orjson.dumps([1])])
            line = line or orjson.dumps({**event, "channel_id": ""})
        lines.append(line)
    # Every workspace (so every partition) ends at the same event time: whichever order the
    # partitions are read in, no partition's greatest ts lies behind the watermark, so the
    # final counts are docs/semantics/windows.md 2's for any interleaving (its proviso holds by construction)
    t += 1
    lines += [orjson.dumps({"workspace_id": f"w{w}", "channel_id": "end", "user_id": "u", "ts": t}) for w in range(41)]
    return lines


def read_partitions(brokers: str, topic: str) -> dict[int, list[bytes]]:
    parts = topic_partitions(brokers, topic)
    consumer = Consumer({"bootstrap.servers": brokers, "group.id": "tests", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    out: dict[int, list[bytes]] = {p: [] for p in parts}
    done: set[int] = set()
    while len(done) < len(parts):
        for m in consumer.consume(1000, 0.5):
            if m.error() is not None:
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                done.add(m.partition())
            else:
                out[m.partition()].append(m.value())
    consumer.close()
    return out


def model_of(parts: dict[int, list[bytes]], topic: str, window_buckets: int, users: bool = False):
    """The model fed the partitions round-robin, valid events only (shape rules are per line)."""
    events = {p: [(f"{topic}/{p}", off, parse_message(raw, "", off, 0)) for off, raw in enumerate(lines)]
              for p, lines in parts.items()}
    order = []
    longest = max(len(v) for v in events.values())
    for i in range(longest):
        for p in sorted(events):
            if i < len(events[p]):
                order.append(events[p][i])
    valid = [(part, off, tuple(e[:4])) for part, off, e in order if type(e) is tuple]
    shape = Counter(e.reason for _, _, e in order if type(e) is not tuple)
    return run_model(valid, 60_000, window_buckets, users), shape


@pytest.mark.parametrize("count,summary,compact_bytes,stage", [
    ("messages", 0, None, "2000"),
    ("users", 0, "3000", "40"),  # changelogs compact into new generations all the time; snapshots are staged
    ("messages", 16, "3000", "0"),  # the per-bucket summaries survive too; every snapshot in one script
])
def test_activity_survives_kill_9_and_resumes_exactly(tmp_path, kafka_brokers, topic, redis_url, redis_client,
                                                      namespace, count, summary, compact_bytes, stage, monkeypatch):
    log = tmp_path / "messages.jsonl"
    # 120k messages: with the kernel a run of 40k could finish before its second kill landed
    log.write_bytes(b"".join(line + b"\n" for line in message_log(120_000, 3)))
    produce_file(str(log), KafkaEndpoint(kafka_brokers, topic), partitions=3, progress=False, key_field="workspace_id")
    parts = read_partitions(kafka_brokers, topic)
    model, shape = model_of(parts, topic, 5, count == "users")
    assert model.proviso_holds()

    dead = tmp_path / "dead.jsonl"
    ns = activity_namespace(namespace)
    command = [*RANKFLOW, "run", "--flow", "activity", "--window-buckets", "5",
               "--input", f"kafka:{kafka_brokers}/{topic}", "--until-eof", "--redis", redis_url,
               "--namespace", namespace, "--dead-letter", f"jsonl:{dead}", "--recovery-dir", str(tmp_path / "rec"),
               "--barrier-ms", "50", "--partitions", "4", "--count", count, "--global-summary", str(summary),
               "--publish-stage", stage, "--read-batch", "500"]  # many small snapshots: kills land mid-run
    if compact_bytes is not None:  # a shard compacts once its deltas pass compact_bytes, early in the log
        monkeypatch.setenv("RANKFLOW_CHANGELOG_MIN_BYTES", compact_bytes)
        monkeypatch.setenv("RANKFLOW_CHANGELOG_FACTOR", "0")
    monkeypatch.setenv("RANKFLOW_STAGE_EVERY_S", "0")  # with --publish-stage 40: every large snapshot staged

    def progress() -> int:
        snap = read_latest(redis_client, ns)
        return sum(snap["positions"].values()) if snap else -1

    changelogs = tmp_path / "rec" / "window-changelog"
    compacted: set[str] = set()

    def generations() -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for path in changelogs.glob("*.log"):
            shard, generation = path.name[:-len(".log")].rsplit(".g", 1)
            out.setdefault(shard, []).append(int(generation))
        return out

    def committed_compaction() -> bool:
        """Some shard's first generation was replaced and then released (deleted): Bytewax can
        no longer resume before that compaction (connectors/changelog.py), so the first kill waits
        for it and every resume after it must start from a later generation (a condition on the
        files, not a moment: where a compaction falls depends on the machine's speed)."""
        compacted.update(shard for shard, gens in generations().items() if min(gens) >= 2)
        return bool(compacted)

    kills = kill_9_while_publishing(command, progress, random.Random(4), 3, sum(len(v) for v in parts.values()),
                                    committed_compaction if compact_bytes is not None else None)
    assert kills >= 2, "the flow finished before it could be killed twice: make the log bigger"
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr

    final = read_latest(redis_client, ns)
    assert sum(final["positions"].values()) == sum(len(v) for v in parts.values())
    assert final["watermark"] == model.w
    check_rankings(redis_client, namespace, model, summary)
    assert not redis_client.exists(Keys(ns, current_generation(redis_client, ns)).workspaces_staged), \
        "every staged slot was switched or freed, whatever the kills interrupted"
    if compact_bytes is not None:  # the kills came after a committed compaction: no resume went back before it
        assert compacted, "the first kill came after a committed compaction"
        final_generations = generations()
        assert all(min(final_generations[shard]) >= 2 for shard in compacted), final_generations
    letters = [orjson.loads(x) for x in dead.read_bytes().splitlines()]
    assert len({(d["position"]["partition"], d["position"]["offset"]) for d in letters}) == len(letters), "once each"
    assert Counter(d["reason"] for d in letters if d["reason"] != "expired") == shape
    first = final["window_start"]
    assert all(orjson.loads(d["raw"])["ts"] < first for d in letters if d["reason"] == "expired")
    assert final["dead_letters"] == len(letters)
    history = read_history(redis_client, ns)
    assert len({s["run"] for s in history}) >= 3, "snapshots of several executions"
    seen: dict[str, int] = {}
    for snap in history:
        assert snap["errors"] == []
        for part, offset in snap["positions"].items():
            assert offset >= seen.get(part, 0), "a published snapshot went back in time"
            seen[part] = offset

    rebuilt = subprocess.run([*RANKFLOW, "rebuild", "--flow", "activity", "--window-buckets", "5",
                              "--input", f"kafka:{kafka_brokers}/{topic}", "--redis", redis_url,
                              "--namespace", namespace, "--dead-letter", f"jsonl:{tmp_path / 'rebuild-dead.jsonl'}",
                              "--partitions", "3", "--count", count, "--global-summary", str(summary),
                              "--publish-stage", stage],
                             capture_output=True, text=True, timeout=300)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert read_latest(redis_client, ns)["run"] != final["run"]
    check_rankings(redis_client, namespace, model, summary)


def check_rankings(client: redis.Redis, namespace: str, model, summary: int = 0) -> None:
    reader = ActivityReader(client, namespace)
    counts = model.counts()
    for ws in sorted({ws for ws, _ in counts} | {"w1", "nobody"}):
        got = [(i["channel_id"], i["count"]) for i in reader.top(ws, 100)["items"]]
        assert got == workspace_ranking(counts, ws)[:100], ws
    items = reader.global_top(100)["items"]
    if summary:
        check_summary_items([((i["workspace_id"], i["channel_id"]), i["count_low"], i["count_high"]) for i in items],
                            counts, summary, 100)
    else:
        assert [((i["workspace_id"], i["channel_id"]), i["count"]) for i in items] == global_ranking(counts)[:100]
