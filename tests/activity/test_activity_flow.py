"""The activity flow end to end on a JSON Lines log: docs/semantics/windows.md's worked example, random logs
against the model, dead letters, and the readers (CLI and ``connectors.activity_read``)."""

from __future__ import annotations

import random
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

from rankflow.cli import main
from rankflow.connectors import redis_activity
from rankflow.connectors.activity_read import ActivityReader, NoCount
from rankflow.connectors.redis_read import read_history, read_latest
from rankflow.connectors.source_batch import STOP
from rankflow.connectors.redis_keys import activity_namespace
from rankflow.options import RunOptions
from rankflow.runner import run
from tests.snapshot_stamp import stamped, stored_published_at
from tests.window_model import global_ranking, run_model, workspace_ranking

EXAMPLE = [("x", "u1", 600_000), ("y", "u2", 610_000), ("x", "u1", 650_000), ("y", "u3", 700_000),
           ("x", "u1", 590_000), ("x", "u4", 820_000), ("y", "u2", 650_000), ("x", "u4", 830_000)]


def line(ws: str, ch: str, user: str, ts: Any) -> bytes:
    return orjson.dumps({"workspace_id": ws, "channel_id": ch, "user_id": user, "ts": ts})


def run_activity(redis_url: str, tmp: Path, lines: list[bytes], **options: Any) -> dict[str, Any]:
    path = tmp / f"messages-{uuid.uuid4().hex[:6]}.jsonl"
    path.write_bytes(b"".join(x + b"\n" for x in lines))
    dead = tmp / f"dead-{uuid.uuid4().hex[:6]}.jsonl"
    namespace = options.pop("namespace", f"a-{uuid.uuid4().hex[:10]}")
    final = run(RunOptions(input=f"jsonl:{path}", until_eof=True, redis_url=redis_url, namespace=namespace,
                           dead_letter=f"jsonl:{dead}", flow="activity", **options))
    assert final is not None
    return {"final": final, "namespace": namespace, "path": str(path),
            "dead": [orjson.loads(x) for x in dead.read_bytes().splitlines()] if dead.exists() else []}


@pytest.mark.parametrize("count,expected", [("messages", [("x", 2), ("y", 1)]), ("users", [("y", 1), ("x", 1)])])
def test_the_worked_example(redis_url, redis_client, tmp_path, count, expected):
    out = run_activity(redis_url, tmp_path, [line("A", *e) for e in EXAMPLE], bucket_seconds=60,
                       window_buckets=3, count=count, song_partitions=2)
    final = out["final"]
    assert (final["window_start"], final["window_end"], final["watermark"]) == (660_000, 840_000, 830_000)
    assert [(d["reason"], d["position"]["offset"]) for d in out["dead"]] == [("expired", 6)]
    assert final["dead_letters"] == 1 and final["dead_letters_by_reason"] == {"expired": 1}
    reader = ActivityReader(redis_client, out["namespace"])
    top = reader.top("A", 10)
    assert top["snapshot_id"] == final["snapshot_id"]
    assert [(i["channel_id"], i["count"]) for i in top["items"]] == expected
    assert [i["rank"] for i in top["items"]] == [1, 2]
    assert (top["window_start"], top["window_end"], top["watermark"]) == (660_000, 840_000, 830_000)
    first, second = expected
    at = stored_published_at(redis_client, activity_namespace(out["namespace"]))
    assert stamped(reader.channel("A", first[0]), at) == {
        "snapshot_id": final["snapshot_id"], "published_at": at, "workspace_id": "A",
        "channel_id": first[0], "count": first[1], "rank": 1}
    assert reader.channel("A", second[0])["rank"] == 2
    with pytest.raises(NoCount):
        reader.channel("A", "nope")
    glob = reader.global_top(10)
    assert [(i["workspace_id"], i["channel_id"], i["count"]) for i in glob["items"]] == [
        ("A", ch, n) for ch, n in expected]


def test_cli_reads_and_exit_statuses(redis_url, tmp_path, capsysbinary):
    out = run_activity(redis_url, tmp_path, [line("A", *e) for e in EXAMPLE], bucket_seconds=60, window_buckets=3)
    ns = ["--redis", redis_url, "--namespace", out["namespace"]]
    capsysbinary.readouterr()
    assert main(["activity", "top", "--workspace", "A", "--k", "1", "--json", *ns]) == 0
    got = orjson.loads(capsysbinary.readouterr().out)
    at = stored_published_at(redis.Redis.from_url(redis_url), activity_namespace(out["namespace"]))
    assert list(got)[:3] == ["snapshot_id", "published_at", "age_ms"]
    assert stamped(got, at) == {"snapshot_id": out["final"]["snapshot_id"], "published_at": at, "workspace_id": "A",
                                "window_start": 660_000, "window_end": 840_000, "watermark": 830_000,
                                "items": [{"rank": 1, "channel_id": "x", "count": 2}]}
    assert main(["activity", "top", "--global", "--k", "5", "--json", *ns]) == 0
    got = orjson.loads(capsysbinary.readouterr().out)
    assert stamped(got, at)["snapshot_id"] == out["final"]["snapshot_id"]
    assert "workspace_id" not in got and got["items"][0] == {"rank": 1, "workspace_id": "A", "channel_id": "x",
                                                             "count": 2}
    assert main(["activity", "top", "--workspace", "nobody", "--json", *ns]) == 0
    assert orjson.loads(capsysbinary.readouterr().out)["items"] == []
    assert main(["activity", "channel", "--workspace", "A", "--channel", "y", "--json", *ns]) == 0
    assert stamped(orjson.loads(capsysbinary.readouterr().out), at)["rank"] == 2
    assert main(["activity", "channel", "--workspace", "A", "--channel", "zz", *ns]) == 1
    for k in ("0", "101", "-3"):
        assert main(["activity", "top", "--workspace", "A", "--k", k, *ns]) == 2
        assert main(["activity", "top", "--global", "--k", k, *ns]) == 2
    assert main(["activity", "top", "--global", *["--redis", redis_url, "--namespace", "never-" + uuid.uuid4().hex]]) == 1
    main(["activity", "top", "--workspace", "A", *ns])  # the table form prints
    assert b"snapshot" in capsysbinary.readouterr().out


def test_invalid_lines_are_dead_letters_with_reasons(redis_url, tmp_path):
    lines = [b"", b"{", b"[1]", b'{"workspace_id": "A"}', line("A", "x", "u", True), line("A", "", "u", 5),
             line("A", "x", "u", -1), line("A", "x", "u", 100),
             b'{"workspace_id": "A", "channel_id": "x", "user_id": "u", "ts": 1000000000000000000000000000000}',
             line("", "data-0", "u38", True), line("x" * 65, 5, "u", 1)]  # field by field: workspace_id first
    out = run_activity(redis_url, tmp_path, lines)
    reasons = {d["position"]["offset"]: d["reason"] for d in out["dead"]}
    assert reasons == {0: "invalid_json", 1: "invalid_json", 2: "not_an_object", 3: "missing_field",
                       4: "wrong_type", 5: "out_of_range", 6: "out_of_range", 9: "out_of_range", 10: "out_of_range"}
    assert out["final"]["watermark"] == 10**30 and out["final"]["active_pairs"] == 1  # the huge ts counts alone
    assert main(["activity", "top", "--global", "--json", "--redis", redis_url, "--namespace", out["namespace"]]) == 0
    assert all(d["raw"] is not None and d["detail"] for d in out["dead"])


def follow_in_chunks(redis_url: str, tmp: Path, lines: list[bytes], chunk: int, **options: Any) -> dict[str, Any]:
    """Run the flow live on a file, appending ``chunk`` lines per published snapshot: many
    snapshots, each cutting the input somewhere else."""
    path = tmp / f"live-{uuid.uuid4().hex[:6]}.jsonl"
    path.write_bytes(b"")
    namespace = f"a-{uuid.uuid4().hex[:10]}"
    opts = RunOptions(input=f"jsonl:{path}", redis_url=redis_url, namespace=namespace, flow="activity",
                      dead_letter=f"jsonl:{tmp / 'dead-live.jsonl'}", **options)
    failure: list[BaseException] = []
    thread = threading.Thread(target=lambda: _catch(run, opts, failure), name="flow")
    thread.start()
    client = redis.Redis.from_url(redis_url)
    try:
        with open(path, "ab") as out:
            for n in range(chunk, len(lines) + chunk, chunk):
                out.write(b"".join(x + b"\n" for x in lines[n - chunk:n]))
                out.flush()
                deadline = time.monotonic() + 60
                while (snap := read_latest(client, activity_namespace(namespace))) is None or \
                        snap["positions"][str(path)] < min(n, len(lines)):
                    assert not failure and time.monotonic() < deadline, f"line {n} was never published: {failure}"
                    time.sleep(0.005)
    finally:
        STOP.set()
        thread.join(timeout=60)
        client.close()
    assert not failure, failure
    return {"path": str(path), "namespace": namespace}


def _catch(fn: Any, opts: RunOptions, failure: list[BaseException]) -> None:
    try:
        fn(opts)
    except BaseException as exc:  # noqa: BLE001 - reported by the test thread
        failure.append(exc)


def test_every_snapshot_is_the_model_of_its_input(redis_url, redis_client, tmp_path, monkeypatch):
    """Per snapshot: the published watermark and global top are the model's over the input before
    its positions (docs/semantics/windows.md 6), however the barriers cut it."""
    monkeypatch.setattr(redis_activity, "STAGE_EVERY_S", 0.0)  # stage every large snapshot
    rnd = random.Random(7)
    log = [(f"w{rnd.randrange(3)}", f"c{rnd.randrange(5)}", f"u{rnd.randrange(4)}",
            rnd.randrange(0, 40) * 20_000) for _ in range(300)]
    out = follow_in_chunks(redis_url, tmp_path, [line(*e) for e in log], 7, window_buckets=4, song_partitions=3,
                           publish_stage=1)  # most snapshots staged (those changing 2 channels or more)
    history = read_history(redis_client, activity_namespace(out["namespace"]))
    assert len(history) > 20
    for snap in history:
        end = snap["positions"][out["path"]]
        model = run_model((("p", off, e) for off, e in enumerate(log[:end])), 60_000, 4)
        assert snap["watermark"] == model.w
        assert [(i["workspace_id"], i["channel_id"], i["count"]) for i in snap["global"]] == [
            (ws, ch, n) for (ws, ch), n in global_ranking(model.counts())[:100]], (snap, end, [
                (off, e) for off, e in enumerate(log[:end]) if e[:2] == ("w0", "c0")])
    final = run_model((("p", off, e) for off, e in enumerate(log)), 60_000, 4)
    reader = ActivityReader(redis_client, out["namespace"])
    for ws in ("w0", "w1", "w2"):
        assert [(i["channel_id"], i["count"]) for i in reader.top(ws, 100)["items"]] == workspace_ranking(
            final.counts(), ws)


ids = st.sampled_from(["a", "b", "é", "a!", "🎉"])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(log=st.lists(st.tuples(ids, ids, st.sampled_from(["u1", "u2"]), st.integers(0, 30).map(lambda m: m * 30_000)),
                    min_size=1, max_size=60),
       count=st.sampled_from(["messages", "users"]), partitions=st.integers(1, 3),
       stage=st.sampled_from([0, 1, 3, 2000]))
def test_random_logs_match_the_model(redis_url, redis_client, tmp_path, log, count, partitions, stage, monkeypatch):
    monkeypatch.setattr(redis_activity, "STAGE_EVERY_S", 0.0)  # stage every large snapshot
    out = run_activity(redis_url, tmp_path, [line(*e) for e in log], bucket_seconds=60, window_buckets=3,
                       count=count, song_partitions=partitions, read_chunk_bytes=256, publish_stage=stage)
    model = run_model((("p", off, e) for off, e in enumerate(log)), 60_000, 3, count == "users")
    assert sorted(d["position"]["offset"] for d in out["dead"]) == [off for _, off in model.expired]
    reader = ActivityReader(redis_client, out["namespace"])
    for ws in {e[0] for e in log}:
        got = [(i["channel_id"], i["count"]) for i in reader.top(ws, 100)["items"]]
        assert got == workspace_ranking(model.counts(), ws)
    assert [(i["workspace_id"], i["channel_id"], i["count"]) for i in reader.global_top(100)["items"]] == [
        (ws, ch, n) for (ws, ch), n in global_ranking(model.counts())]


def test_global_summary_answers_carry_bounds(redis_url, redis_client, tmp_path, capsysbinary):
    rnd = random.Random(11)
    log = [(f"w{rnd.randrange(4)}", f"c{min(int(rnd.paretovariate(1.1)), 30)}", "u", 600_000 + i * 50)
           for i in range(2000)]
    out = run_activity(redis_url, tmp_path, [line(*e) for e in log], global_summary=8, song_partitions=3)
    counts = run_model((("p", off, e) for off, e in enumerate(log)), 60_000, 60).counts()
    answer = ActivityReader(redis_client, out["namespace"]).global_top(100)
    items = [((i["workspace_id"], i["channel_id"]), i["count_low"], i["count_high"]) for i in answer["items"]]
    assert items and all("count" not in i for i in answer["items"])
    total = sum(counts.values())
    for pair, low, high in items:
        assert low <= counts[pair] <= high and (high - low) * 8 <= total
    heavy = {pair for pair, n in counts.items() if n * 8 > total}
    assert heavy <= {pair for pair, _, _ in items}
    reader = ActivityReader(redis_client, out["namespace"])  # per workspace: exact
    assert [(i["channel_id"], i["count"]) for i in reader.top("w1", 100)["items"]] == workspace_ranking(counts, "w1")
    ns = ["--redis", redis_url, "--namespace", out["namespace"]]
    capsysbinary.readouterr()
    assert main(["activity", "top", "--global", "--k", "3", *ns]) == 0
    assert b".." in capsysbinary.readouterr().out  # the table shows the bounds


def test_global_summary_with_users_is_a_usage_error(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(line("A", "x", "u", 1) + b"\n")
    assert main(["run", "--flow", "activity", "--input", f"jsonl:{path}", "--until-eof", "--count", "users",
                 "--global-summary", "10", "--redis", "redis://127.0.0.1:1/0"]) == 2
    with pytest.raises(SystemExit) as exited:  # argparse refuses it
        main(["run", "--flow", "activity", "--input", f"jsonl:{path}", "--until-eof", "--window-buckets", "0"])
    assert exited.value.code == 2


def test_a_quiet_partition_stops_holding_the_watermark_in_a_live_run(redis_url, redis_client, tmp_path):
    """docs/semantics/windows.md 2, idle partitions: two input files (two partitions); the second delivers one
    early event and goes quiet. Live, after the idle time the watermark follows the first file
    alone; the quiet file's next event takes it back without the watermark going back."""
    from rankflow.connectors.jsonl import JsonlSource
    from rankflow.connectors.redis_generations import join_run
    from rankflow.execution import execute
    from rankflow.runner import build_dataflow

    busy, quiet = tmp_path / "busy.jsonl", tmp_path / "quiet.jsonl"
    busy.write_bytes(line("A", "x", "u", 600_000) + b"\n")
    quiet.write_bytes(line("A", "y", "u", 500_000) + b"\n")
    namespace = f"a-{uuid.uuid4().hex[:10]}"
    opts = RunOptions(input=f"jsonl:{busy}", redis_url=redis_url, namespace=namespace, flow="activity",
                      dead_letter=f"jsonl:{tmp_path / 'dead.jsonl'}", idle_timeout_s=0.5, barrier_ms=50,
                      window_buckets=60)
    token, generation = join_run(redis_client, opts.redis_namespace, uuid.uuid4().hex, fresh=True)
    flow = build_dataflow(opts, token, generation, live=True,
                          source=JsonlSource([str(busy), str(quiet)], follow=True), fresh=True)
    failure: list[BaseException] = []
    thread = threading.Thread(target=lambda: _catch(lambda o: execute(flow, o, None), opts, failure))
    thread.start()
    ns = activity_namespace(namespace)

    def wait_for(predicate, what: str) -> dict:
        deadline = time.monotonic() + 30
        while True:
            snap = read_latest(redis_client, ns)
            if snap is not None and predicate(snap):
                return snap
            assert not failure and time.monotonic() < deadline, f"{what}: {snap} {failure}"
            time.sleep(0.02)

    try:
        wait_for(lambda s: s["watermark"] == 500_000, "both partitions heard")
        with open(busy, "ab") as out:
            out.write(line("A", "x", "u", 700_000) + b"\n")
        snap = wait_for(lambda s: s["watermark"] == 700_000, "the quiet partition left out after the idle time")
        assert snap["positions"][str(quiet)] == 1
        with open(quiet, "ab") as out:
            out.write(line("A", "y", "u", 650_000) + b"\n")  # back, older than W
        snap = wait_for(lambda s: s["positions"][str(quiet)] == 2, "the quiet partition's new event")
        assert snap["watermark"] == 700_000, "W never goes back"
        top = ActivityReader(redis_client, namespace).top("A", 10)
        assert [(i["channel_id"], i["count"]) for i in top["items"]] == [("y", 2), ("x", 2)]  # ties: id desc
    finally:
        STOP.set()
        thread.join(timeout=60)
    assert not failure, failure
