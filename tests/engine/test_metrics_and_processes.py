"""Prometheus metrics of a live run, and a run over several processes."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from rankflow.connectors.redis_generations import current_generation
from rankflow.connectors.redis_keys import Keys
from rankflow.connectors.redis_read import read_history, read_latest
from rankflow.generate import Chaos, generate
from rankflow.options import FLOWS, RunOptions
from rankflow.services import free_port
from tests.events import ranking
from tests.flow_logs import LOGS
from tests.model import model_of_lines, read_lines


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    reply = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    assert reply.status_code == 200, f"the scrape answered {reply.status_code}: {reply.text[:200]}"
    text = reply.text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def listening_addresses(port: int) -> set[str]:
    """The local addresses of the TCP sockets listening on ``port``, from Linux's
    /proc/net tables (addresses are 32-bit words in the machine's byte order)."""
    found = set()
    for table, family, words in (("/proc/net/tcp", socket.AF_INET, 1), ("/proc/net/tcp6", socket.AF_INET6, 4)):
        if not os.path.exists(table):
            continue
        with open(table) as f:
            next(f)
            for line in f:
                local, state = line.split()[1], line.split()[3]
                address, hex_port = local.split(":")
                if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                    raw = struct.pack(f"={words}I", *(int(address[i:i + 8], 16) for i in range(0, 8 * words, 8)))
                    found.add(socket.inet_ntop(family, raw))
    return found


def test_metrics_listen_on_loopback_unless_told_otherwise(tmp_path, redis_url, namespace):
    log = tmp_path / "events.jsonl"
    generate(users=10, songs=5, events=100, seed=1, out=log)
    ports = {"127.0.0.1": free_port(), "0.0.0.0": free_port()}
    runs = [subprocess.Popen([sys.executable, "-m", "rankflow.cli", "run", "--input", f"jsonl:{log}",
                              "--redis", redis_url, "--namespace", f"{namespace}-{i}", "--metrics-port", str(port),
                              *(["--metrics-host", host] if host != "127.0.0.1" else []),
                              "--dead-letter", f"jsonl:{tmp_path / f'dl-{i}.jsonl'}"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            for i, (host, port) in enumerate(ports.items())]
    try:
        for proc, port in zip(runs, ports.values()):
            deadline = time.monotonic() + 60
            while True:
                try:
                    scrape(port)
                    break
                except httpx.TransportError:
                    assert proc.poll() is None, proc.stderr.read()
                    assert time.monotonic() < deadline, "the metrics never answered on 127.0.0.1"
                    time.sleep(0.1)
        assert listening_addresses(ports["127.0.0.1"]) == {"127.0.0.1"}, "by default, only this machine"
        assert listening_addresses(ports["0.0.0.0"]) == {"0.0.0.0"}, "--metrics-host 0.0.0.0: every interface"
    finally:
        for proc in runs:
            proc.send_signal(signal.SIGINT)
        for proc in runs:
            proc.wait(timeout=30)


def test_metrics_of_a_live_run(tmp_path, redis_url, redis_client, namespace):
    log = tmp_path / "events.jsonl"
    generate(users=300, songs=40, events=5_000, seed=9, out=log, chaos=Chaos(timeout=0.03, idle_ms=2_000))
    lines = read_lines(str(log))
    model = model_of_lines(lines)
    port = free_port()
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "rankflow.cli", "run", "--input", f"jsonl:{log}",
                             "--redis", redis_url, "--namespace", namespace, "--barrier-ms", "50",
                             "--metrics-port", str(port), "--dead-letter", f"jsonl:{tmp_path / 'dl.jsonl'}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            snap = read_latest(redis_client, namespace)
            if snap and snap["positions"][str(log)] == len(lines):
                break
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.poll() else ""
            time.sleep(0.05)
        m = scrape(port)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    assert m[("rankflow_input_records_total", (("partition", str(log)),))] == len(lines)
    assert m[("rankflow_input_lag", (("partition", str(log)),))] == 0
    assert m[("rankflow_counted_users", ())] == model.counted_users
    assert m[("rankflow_total_listeners", ())] == model.total
    assert m[("rankflow_active_songs", ())] == len(model.ranking(10**6))
    dead = sum(v for (name, _), v in m.items() if name == "rankflow_dead_letters_total")
    assert dead == model.dead_letters
    assert m[("rankflow_events_total", (("verdict", "repeated"),))] > 0, "duplicates are counted"
    assert m[("rankflow_events_total", (("verdict", "superseded"),))] > 0
    assert m[("rankflow_events_total", (("verdict", "timed_out"),))] == model.timed_out > 0, "docs/semantics/listeners.md 6"
    assert m[("rankflow_events_total", (("verdict", "stale_timeout"),))] > 0
    assert m[("rankflow_events_total", (("verdict", "early_timeout"),))] > 0
    age = m[("rankflow_snapshot_age_seconds", ())]
    assert 0 <= age <= time.monotonic() - started, "the age of a snapshot of this run"
    assert m[("rankflow_publish_latency_seconds_count", ())] > 0
    assert len([k for k in m if k[0] == "rankflow_partition_lag_seconds"]) == 16


GAUGES = {
    "listeners": {"rankflow_counted_users": lambda d, _: d["counted_users"],
                  "rankflow_total_listeners": lambda d, _: d["total_listeners"],
                  "rankflow_active_songs": lambda d, _: d["active_songs"],
                  "rankflow_split_songs": lambda d, _: len(d["split_songs"])},
    "boards": {"rankflow_boards": lambda _, redis_keys: redis_keys[0].scard(redis_keys[1].boards),
               "rankflow_changed_boards": lambda d, _: sum(len(boards) for boards in d["changed_boards"].values()),
               "rankflow_dropped_boards": lambda d, _: len(d["dropped_boards"])},
    "activity": {"rankflow_active_pairs": lambda d, _: d["active_pairs"],
                 "rankflow_changed_workspaces": lambda d, _: len(d["changed_workspaces"]),
                 "rankflow_watermark_seconds": lambda d, _: d["watermark"] / 1000},
}
"""Per flow, its own snapshot gauges (the first one > 0 once the whole log is in) and their
values in what it published: the snapshot document, or Redis (client and keys) beside it."""


def test_every_flow_has_its_gauges_checked():
    assert set(LOGS) == set(GAUGES) == set(FLOWS), "a new flow: give it a log and its gauges here"


@pytest.mark.parametrize("flow", FLOWS)
def test_each_flow_exports_the_gauges_of_its_snapshots(tmp_path, redis_url, redis_client, namespace, flow):
    """A live run of each flow, scraped while it publishes: the gauges of a snapshot are those of
    what it published (every scrape answers; the metrics never ask which flow runs)."""
    log = tmp_path / "events.jsonl"
    LOGS[flow](log)
    lines = len(read_lines(str(log)))
    port = free_port()
    ns = RunOptions(input=f"jsonl:{log}", namespace=namespace, flow=flow).redis_namespace
    proc = subprocess.Popen([sys.executable, "-m", "rankflow.cli", "run", "--flow", flow, "--input", f"jsonl:{log}",
                             "--redis", redis_url, "--namespace", namespace, "--barrier-ms", "50",
                             "--metrics-port", str(port), "--dead-letter", f"jsonl:{tmp_path / 'dl.jsonl'}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    own = GAUGES[flow]
    first = next(iter(own))
    try:
        deadline = time.monotonic() + 120
        while True:  # until a scrape shows a snapshot of the whole log
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "no scrape showed a snapshot of the whole log"
            try:
                m = scrape(port)
            except httpx.TransportError:  # not listening yet
                m = {}
            sid = m.get(("rankflow_snapshot_id", ()))
            doc = {d["snapshot_id"]: d for d in read_history(redis_client, ns)}.get(sid and int(sid))
            if doc is not None and sum(doc["positions"].values()) == lines:
                break
            time.sleep(0.05)
        redis_keys = redis_client, Keys(ns, current_generation(redis_client, ns))
        assert m[(first, ())] > 0, f"{first}: the whole log is in"
        for name, value in own.items():
            assert m[(name, ())] == value(doc, redis_keys), name
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    lags = {labels[0][1]: v for (name, labels), v in m.items() if name == "rankflow_partition_lag_seconds"}
    assert lags == {part: ms / 1000 for part, ms in doc["partition_lag_ms"].items()}
    assert m[("rankflow_snapshot_age_seconds", ())] >= 0
    others = {name for f, gauges in GAUGES.items() if f != flow for name in gauges} - set(own)
    assert not {name for name, _ in m} & others, "only the gauges of this flow's snapshots"


def test_two_processes_give_the_results_of_one(flow, tmp_path):
    log = tmp_path / "events.jsonl"
    generate(users=1_000, songs=100, events=20_000, seed=13, out=log)
    one = flow.run(str(log))["final"]
    two = flow.run(str(log), processes=2, workers=1)["final"]
    model = model_of_lines(read_lines(str(log)))
    assert ranking(one) == ranking(two) == model.ranking(100)
    for field in ("positions", "total_listeners", "counted_users", "dead_letters", "active_songs"):
        assert one[field] == two[field]


@pytest.mark.parametrize("by,changelogs", [("partition", 1), ("user", 16)])
def test_two_processes_resume_from_their_recovery_directory(flow, tmp_path, by, changelogs):
    """User shards on either process keep their changelogs in the one recovery directory (one per
    input partition, or one per shard of users)."""
    log = tmp_path / "events.jsonl"
    generate(users=1_000, songs=100, events=20_000, seed=17, out=log)
    lines = read_lines(str(log))
    half = flow.write_log(lines[:9_000], name="half.jsonl")
    common = dict(processes=2, workers=1, recovery_dir=str(tmp_path / "recovery"),
                  dead_letter=f"jsonl:{tmp_path / 'dead.jsonl'}", shard_by=by)
    first = flow.run(half, **common)
    flow.write_log(lines, name="half.jsonl")  # the rest arrives
    final = flow.run(half, namespace=first["namespace"], **common)["final"]
    model = model_of_lines(lines)
    assert ranking(final) == model.ranking(100)
    assert final["total_listeners"] == final["counted_users"] == model.counted_users
    assert final["positions"] == {half: len(lines)}
    assert len(list((tmp_path / "recovery" / "user-changelog").glob("*.log"))) == changelogs


def _create_store(opts, ready, results) -> None:
    from rankflow.recovery import recovery_config
    ready.wait()
    try:
        recovery_config(opts)
        results.put("ok")
    except Exception as exc:  # noqa: BLE001 - the test reports it
        results.put(f"{type(exc).__name__}: {exc}")


def test_processes_that_start_together_create_one_store(tmp_path):
    """The processes of one run look for the recovery store and create it at once: one creates it,
    the others find it (two creating it failed in SQLite, "table parts already exists")."""
    import multiprocessing

    from rankflow.options import RunOptions
    context = multiprocessing.get_context("fork")
    n = 6
    ready, results = context.Barrier(n), context.Queue()
    opts = RunOptions(input=f"jsonl:{tmp_path / 'in.jsonl'}", recovery_dir=str(tmp_path / "recovery"))
    children = [context.Process(target=_create_store, args=(opts, ready, results)) for _ in range(n)]
    for child in children:
        child.start()
    outcomes = [results.get(timeout=120) for _ in children]
    for child in children:
        child.join()
    assert outcomes == ["ok"] * n
    assert len(list((tmp_path / "recovery").glob("part-*.sqlite3"))) == 2
