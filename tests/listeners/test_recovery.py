"""Crash recovery: kill -9 at random moments, resume, and nothing is lost or counted twice.

A generated log with chaos goes to a real broker. The flow runs with a recovery
directory and is killed with SIGKILL several times while it is publishing, then run
to the end. The final ranking must equal the reference model's, the dead letters
must be written exactly once, and no published snapshot may go back in time.
"""

from __future__ import annotations

import random
from collections import Counter
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import redis

from rankflow.connectors.redis_read import read_counts, read_history, read_latest
from rankflow.generate import Chaos, generate
from rankflow.produce import produce_file
from rankflow.connectors.kafka import KafkaEndpoint
from rankflow.cli import build_parser
from rankflow.options import ServiceError, UsageError
from rankflow.recovery import FORMAT_KEY, LAYOUT_FILE, LAYOUT_FORMAT
from tests.crashes import kill_9_while_publishing
from tests.events import ev, ranking
from tests.engine.test_fencing_and_rebuild import recreate_topic
from tests.model import model_of_lines, read_lines

RANKFLOW = [sys.executable, "-m", "rankflow.cli"]


def progress(client: redis.Redis, namespace: str) -> int:
    snap = read_latest(client, namespace)
    return sum(snap["positions"].values()) if snap else -1


@pytest.mark.parametrize("shards,compact_bytes,timeouts", [
    ("0", None, 0.0),  # one key per user: Bytewax stores every touched user
    ("8", None, 0.01),  # 8 shards of users (the sweeper keys by user) with changelogs (heartbeats write last_active to them), the sweeper's timers
    ("8", "20000", 0.0),  # ... keyed by input partition (3 shards), compacting into new generations all the time
])
def test_kill_9_at_random_moments_then_resume(tmp_path, kafka_brokers, topic, redis_url, redis_client, namespace,
                                              shards, compact_bytes, timeouts, monkeypatch):
    log = tmp_path / "events.jsonl"
    generate(users=5_000, songs=200, events=120_000, seed=23, out=log,
             chaos=Chaos(duplicate=0.05, late=0.05, stop_before_start=0.03, old_device=0.02, conflict=0.005,
                         timeout=timeouts))
    lines = read_lines(str(log))
    model = model_of_lines(lines)
    assert (model.timed_out > 100) == (timeouts > 0)
    produce_file(str(log), KafkaEndpoint(kafka_brokers, topic), partitions=3, progress=False)

    dead = tmp_path / "dead.jsonl"
    command = [*RANKFLOW, "run", "--input", f"kafka:{kafka_brokers}/{topic}", "--until-eof",
               "--redis", redis_url, "--namespace", namespace, "--dead-letter", f"jsonl:{dead}",
               "--recovery-dir", str(tmp_path / "recovery"), "--barrier-ms", "50", "--song-partitions", "4",
               "--user-shards", shards,
               "--read-batch", "2000"]  # small batches: many barriers in this small log, so kills land mid-way
    if compact_bytes is not None:
        monkeypatch.setenv("RANKFLOW_CHANGELOG_MIN_BYTES", compact_bytes)
    kills = kill_9_while_publishing(command, lambda: progress(redis_client, namespace), random.Random(4), 4, len(lines))
    assert kills >= 2, "the flow finished before it could be killed twice: make the log bigger"

    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    resumed = [int(line.rsplit(" ", 1)[1]) for line in done.stderr.splitlines() if "resuming at offset" in line]
    assert len(resumed) == 3 and sum(resumed) > 0, "the last execution resumes from the recovery store"

    final = read_latest(redis_client, namespace)
    assert sum(final["positions"].values()) == len(lines), f"stopped early: {final['positions']}"
    assert ranking(final) == model.ranking(100)
    assert final["total_listeners"] == final["counted_users"] == model.counted_users
    assert final["dead_letters"] == model.dead_letters
    assert sum(final["positions"].values()) == len(lines)
    assert read_counts(redis_client, namespace) == model.counts, "the full count table survives the crashes"
    letters = [orjson.loads(x) for x in dead.read_bytes().splitlines()]
    assert len(letters) == model.dead_letters
    assert len({(d["position"]["partition"], d["position"]["offset"]) for d in letters}) == len(letters)

    if compact_bytes is not None:
        logs = list((tmp_path / "recovery" / "user-changelog").glob("*.log"))
        assert max(int(p.name.rsplit(".g", 1)[1][:-4]) for p in logs) > 2, "changelogs moved to new generations"
        per_shard = Counter(p.name.rsplit(".g", 1)[0] for p in logs)
        assert len(per_shard) == 3 and max(per_shard.values()) <= 2, "replaced generations are removed"
        assert all(name.startswith("partition-") for name in per_shard), "one shard per input partition (--shard-by)"

    history = read_history(redis_client, namespace)
    assert len({s["run"] for s in history}) >= 3, "snapshots of several executions"
    seen: dict[str, int] = {}
    for snap in history:
        assert snap["total_listeners"] == snap["counted_users"] and snap["errors"] == []
        for part, offset in snap["positions"].items():
            assert offset >= seen.get(part, 0), "a published snapshot went back in time"
            seen[part] = offset


def test_a_resume_with_another_layout_is_refused(flow, tmp_path):
    """Stored state is keyed by user shard and song partition: another layout would miscount."""
    path = flow.write_log([ev("u1", "p1", "song_a", "START", 1), ev("u2", "p2", "song_b", "START", 1)])
    recovery, dead = str(tmp_path / "recovery"), f"jsonl:{tmp_path / 'dead.jsonl'}"
    first = flow.run(path, recovery_dir=recovery, dead_letter=dead, user_shards=4, song_partitions=2)
    with pytest.raises(UsageError, match="--song-partitions 2 --user-shards 4"):
        flow.run(path, recovery_dir=recovery, dead_letter=dead, user_shards=8, song_partitions=2)
    with pytest.raises(UsageError, match="--song-partitions 2 --user-shards 4"):
        flow.run(path, recovery_dir=recovery, dead_letter=dead, user_shards=4)
    again = flow.run(path, recovery_dir=recovery, dead_letter=dead, user_shards=4, song_partitions=2, namespace=first["namespace"])
    assert ranking(again["final"]) == [("song_b", 1), ("song_a", 1)]


def _layout(recovery: str) -> dict:
    return orjson.loads((Path(recovery) / LAYOUT_FILE).read_bytes())


def test_a_recovery_directory_records_its_layout_format(flow, tmp_path):
    """Issue 20.9: the layout says its format, and a reader goes by it instead of its shape."""
    path = flow.write_log([ev("u1", "p1", "song_a", "START", 1)])
    recovery = str(tmp_path / "recovery")
    flow.run(path, recovery_dir=recovery, dead_letter=f"jsonl:{tmp_path / 'dead.jsonl'}")
    assert _layout(recovery)[FORMAT_KEY] == LAYOUT_FORMAT


def test_a_directory_from_before_the_format_marker_still_resumes(flow, tmp_path):
    """A directory made before layouts carried their format (legacy: exactly what earlier versions
    wrote) resumes, is still compared on what it recorded, and carries the format from then on."""
    lines = [ev("u1", "p1", "song_a", "START", 1), ev("u2", "p2", "song_b", "START", 1)]
    path = flow.write_log(lines)
    recovery, dead = str(tmp_path / "recovery"), f"jsonl:{tmp_path / 'dead.jsonl'}"
    first = flow.run(path, recovery_dir=recovery, dead_letter=dead, user_shards=4)
    current = _layout(recovery)
    legacy = {k: v for k, v in current.items() if k != FORMAT_KEY}
    (Path(recovery) / LAYOUT_FILE).write_bytes(orjson.dumps(legacy))
    with pytest.raises(UsageError, match="--user-shards 4"):
        flow.run(path, recovery_dir=recovery, dead_letter=dead)
    without_input = {k: v for k, v in legacy.items() if k not in ("input", "dead_letter", "recent_minutes")}
    (Path(recovery) / LAYOUT_FILE).write_bytes(orjson.dumps(without_input))  # older still
    flow.write_log([*lines, ev("u3", "p3", "song_b", "START", 1)])
    again = flow.run(path, recovery_dir=recovery, dead_letter=dead, user_shards=4, namespace=first["namespace"])
    assert ranking(again["final"]) == [("song_b", 2), ("song_a", 1)], "resumed: the first two lines not twice"
    assert _layout(recovery) == current, "recorded in the current format from now on"


def test_a_directory_keyed_by_user_before_shard_by_is_refused_then_resumes_with_it(flow, tmp_path):
    """Issue 40: the user shards' keys changed meaning (by input partition, on the worker that read it).
    A directory made before ``--shard-by`` holds shards keyed by user: a resume with the new default
    would find none of them and count every user again, so it is refused with the option that
    resumes it, and with that option it resumes exactly."""
    lines = [ev("u1", "p1", "song_a", "START", 1), ev("u2", "p2", "song_b", "START", 1)]
    path = flow.write_log(lines)
    recovery, dead = str(tmp_path / "recovery"), f"jsonl:{tmp_path / 'dead.jsonl'}"
    first = flow.run(path, recovery_dir=recovery, dead_letter=dead, shard_by="user")
    before = {k: v for k, v in _layout(recovery).items() if k not in ("shard_by", "workers_in_all")}
    (Path(recovery) / LAYOUT_FILE).write_bytes(orjson.dumps(before))  # what rankflow wrote before issue 40
    with pytest.raises(UsageError, match="--shard-by user: resume with the same options"):
        flow.run(path, recovery_dir=recovery, dead_letter=dead)
    flow.write_log([*lines, ev("u3", "p3", "song_b", "START", 1), ev("u1", "p1", "song_a", "STOP", 1)])
    again = flow.run(path, recovery_dir=recovery, dead_letter=dead, shard_by="user", namespace=first["namespace"])
    assert ranking(again["final"]) == [("song_b", 2)], "resumed: the first two lines not twice"


def test_shards_by_partition_resume_only_on_as_many_workers(flow, tmp_path):
    """Their keys depend on the worker that reads each partition: another worker count is one clear line."""
    lines = [ev("u1", "p1", "song_a", "START", 1), ev("u2", "p2", "song_b", "START", 1)]
    path = flow.write_log(lines)
    recovery, dead = str(tmp_path / "recovery"), f"jsonl:{tmp_path / 'dead.jsonl'}"
    first = flow.run(path, recovery_dir=recovery, dead_letter=dead, workers=2)
    assert _layout(recovery)["shard_by"] == "partition" and _layout(recovery)["workers_in_all"] == 2
    with pytest.raises(UsageError, match="keyed by input partition on 2 workers in all processes, but this run "
                                         "has 1: resume with as many"):
        flow.run(path, recovery_dir=recovery, dead_letter=dead)
    flow.write_log([*lines, ev("u3", "p3", "song_b", "START", 1), ev("u1", "p1", "song_a", "STOP", 1)])
    again = flow.run(path, recovery_dir=recovery, dead_letter=dead, workers=2, namespace=first["namespace"])
    assert ranking(again["final"]) == [("song_b", 2)]


def test_a_directory_of_another_layout_format_is_refused(flow, tmp_path):
    path = flow.write_log([ev("u1", "p1", "song_a", "START", 1)])
    recovery, dead = str(tmp_path / "recovery"), f"jsonl:{tmp_path / 'dead.jsonl'}"
    flow.run(path, recovery_dir=recovery, dead_letter=dead)
    (Path(recovery) / LAYOUT_FILE).write_bytes(orjson.dumps({**_layout(recovery), FORMAT_KEY: LAYOUT_FORMAT + 1}))
    with pytest.raises(UsageError, match=f"recovery layout format {LAYOUT_FORMAT + 1}, this one reads format "
                                         f"{LAYOUT_FORMAT}"):
        flow.run(path, recovery_dir=recovery, dead_letter=dead)


@pytest.mark.parametrize("other", ["boards", "activity"])
def test_a_resume_with_another_flow_is_refused(flow, tmp_path, other):
    """A directory of the listener flow resumed with ``--flow boards`` or ``activity``: one usage error
    naming the stored flow (the other flow's layout has other fields: this was a KeyError)."""
    path = flow.write_log([ev("u1", "p1", "song_a", "START", 1)])
    recovery, dead = str(tmp_path / "recovery"), f"jsonl:{tmp_path / 'dead.jsonl'}"
    flow.run(path, recovery_dir=recovery, dead_letter=dead)
    with pytest.raises(UsageError, match="holds state of a run with --flow listeners "):
        flow.run(path, recovery_dir=recovery, dead_letter=dead, flow=other)


def test_recovery_beyond_a_re_created_topics_end_is_refused(tmp_path, kafka_brokers, topic, redis_url, redis_client,
                                                            namespace):
    """Kafka would jump to the end of the new topic without a word; the run must stop and say why."""
    log = tmp_path / "events.jsonl"
    generate(users=300, songs=30, events=4_000, seed=41, out=log)
    lines = read_lines(str(log))
    produce_file(str(log), KafkaEndpoint(kafka_brokers, topic), partitions=2, progress=False)
    command = [*RANKFLOW, "run", "--input", f"kafka:{kafka_brokers}/{topic}", "--until-eof", "--redis", redis_url,
               "--namespace", namespace, "--dead-letter", f"jsonl:{tmp_path / 'dead.jsonl'}",
               "--recovery-dir", str(tmp_path / "recovery")]
    assert subprocess.run(command, capture_output=True, timeout=120).returncode == 0
    before = read_latest(redis_client, namespace)

    recreate_topic(kafka_brokers, topic, lines[:60])
    again = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert again.returncode == 1
    message = again.stderr.strip().splitlines()[-1]
    assert re.search(rf"kafka {topic}/[01]: the recovery state resumes at offset \d+, but the partition's log "
                     r"holds offsets 0 to \d+ \(end \d+\)", message), message
    assert read_latest(redis_client, namespace) == before, "nothing was published from the wrong position"
    assert "panicked" not in again.stderr and "Traceback" not in again.stderr, again.stderr


def test_a_resume_from_another_input_is_refused(flow, tmp_path):
    """Source positions are stored under the input's names: another input would start at 0
    beside the users and counts of the first one."""
    first = flow.write_log([ev("u1", "p1", "song_a", "START", 1)], name="first.jsonl")
    second = flow.write_log([ev("u1", "p1", "song_a", "START", 1)], name="second.jsonl")
    recovery, dead = str(tmp_path / "recovery"), f"jsonl:{tmp_path / 'dead.jsonl'}"
    flow.run(first, recovery_dir=recovery, dead_letter=dead)
    with pytest.raises(UsageError, match=f"reading JSON Lines '{first}', but this run reads JSON Lines '{second}'"):
        flow.run(second, recovery_dir=recovery, dead_letter=dead)
    with pytest.raises(UsageError, match="reading JSON Lines .*, but this run reads Kafka topic 'events'"):
        flow.run(first, recovery_dir=recovery, dead_letter=dead, input="kafka:127.0.0.1:1/events")


def test_a_resume_writing_dead_letters_elsewhere_is_refused(flow, tmp_path):
    """A JSON Lines dead-letter sink resumes at a byte offset of the file it wrote."""
    path = flow.write_log([b"not json", ev("u1", "p1", "song_a", "START", 1)])
    recovery = str(tmp_path / "recovery")
    flow.run(path, recovery_dir=recovery, dead_letter=f"jsonl:{tmp_path / 'a.jsonl'}")
    other = tmp_path / "b.jsonl"
    other.write_bytes(b"someone else's data\n" * 100)
    with pytest.raises(UsageError, match="writing dead letters to jsonl:.*a.jsonl, but this run writes them to"):
        flow.run(path, recovery_dir=recovery, dead_letter=f"jsonl:{other}")
    assert other.read_bytes() == b"someone else's data\n" * 100


def test_a_truncated_input_file_is_refused_on_resume(flow, tmp_path):
    path = flow.write_log([ev(f"u{i}", "p1", "song_a", "START", 1) for i in range(5)])
    recovery, dead = str(tmp_path / "recovery"), f"jsonl:{tmp_path / 'dead.jsonl'}"
    flow.run(path, recovery_dir=recovery, dead_letter=dead)
    flow.write_log([ev("u1", "p1", "song_a", "START", 1)])
    with pytest.raises(ServiceError, match=r"resumes at line 5 \(byte \d+\), but the file has \d+ bytes"):
        flow.run(path, recovery_dir=recovery, dead_letter=dead)


def test_run_and_rebuild_write_dead_letters_to_different_files_by_default():
    parser = build_parser()
    run_args = parser.parse_args(["run", "--input", "jsonl:x"])
    rebuild_args = parser.parse_args(["rebuild", "--input", "jsonl:x"])
    assert run_args.dead_letter != rebuild_args.dead_letter


def test_recent_plays_survive_kill_9(tmp_path, redis_client, redis_url, namespace):
    """The song partitions' window state (watermark, buckets, open epoch's marks and starts) is in
    the recovery state: after kills and a resume every published snapshot's recent plays are
    the model's at its positions, and the last one's are the whole log's."""
    from tests.events import recent, recent_window
    from tests.model import Model

    log = tmp_path / "events.jsonl"
    generate(users=3_000, songs=150, events=150_000, seed=29, out=log,
             chaos=Chaos(duplicate=0.05, late=0.05, stop_before_start=0.03, old_device=0.02, conflict=0.005))
    lines = read_lines(str(log))
    command = [*RANKFLOW, "run", "--input", f"jsonl:{log}", "--until-eof", "--redis", redis_url,
               "--namespace", namespace, "--dead-letter", f"jsonl:{tmp_path / 'dead.jsonl'}",
               "--recovery-dir", str(tmp_path / "recovery"), "--barrier-ms", "50", "--song-partitions", "3",
               "--recent-minutes", "2"]
    kills = kill_9_while_publishing(command, lambda: progress(redis_client, namespace), random.Random(7), 3, len(lines))
    assert kills >= 2, "the flow finished before it could be killed twice: make the log bigger"
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "resuming at line" in done.stderr or "resuming at" in done.stderr, done.stderr[-2000:]

    history = read_history(redis_client, namespace)
    assert len({s["run"] for s in history}) >= 3, "snapshots of several executions"
    model, seen = Model(), 0
    for snap in history:
        at = snap["positions"][str(log)]
        assert at >= seen, "a published snapshot went back in time"
        for line in lines[seen:at]:
            model.apply_line(line)
        seen = at
        assert recent(snap) == model.recent_ranking(2, 100), f"at line {at}"
        assert recent_window(snap) == model.recent_window(2)
    assert seen == len(lines) and recent(history[-1]), "the whole log, with plays in the window"
