"""``bench-activity`` part 4, memory: bytes per active (workspace, channel) pair.

``memory_pairs`` pairs active in one hour, one message each: bytes per active pair of
the flow's RSS above an empty run's, of Redis ``used_memory``, of the durable run's
recovery directory; exact and ``--global-summary N``; the baseline's Redis. Then a log
where ``memory_churn`` times as many other pairs were active in the hours before, and
the same pairs in the last hour: the same figures, to show memory follows the active
pairs, not the pairs that ever existed.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from rankflow.bench import rig
from rankflow.bench.activity.core import ActivityBench
from rankflow.bench.activity.logs import active_pairs_log, produce_lines
from rankflow.bench.activity.results import ActivityBenchResult, Memory, MemoryRun
from rankflow.bench.activity_baseline import BUCKET_MS, WINDOW_BUCKETS, read_clock
from rankflow.connectors.kafka import ensure_topic
from rankflow.connectors.redis_keys import Keys, activity_namespace

Plan = list[tuple[str, int, bool, list[str]]]  # (run name, hours before, durable, the flow's extra options)


def memory(bench: ActivityBench, result: ActivityBenchResult) -> None:
    cfg = bench.cfg
    out = result.memory = Memory(pairs=cfg.memory_pairs, workspaces=cfg.memory_workspaces, churn=cfg.memory_churn,
                                 summary=cfg.memory_summary)
    logs = {hours_before: _pairs_log(bench, hours_before) for hours_before in (0, cfg.memory_churn)}
    empty = bench.work / "empty.jsonl"
    active_pairs_log(empty, 1, 1, 0, cfg.seed)
    bench.rig.produce(empty, "empty", cfg.partitions)
    bench.flush()
    _, out.rss_empty_bytes, _ = footprint(bench, bench.flow_cmd("empty", "mem-empty"), "mem-empty", 1)
    for name, hours_before, durable, extra in _plan(bench):
        bench.flush()
        events = cfg.memory_pairs * (hours_before + 1)
        run = MemoryRun(name, durable, pairs_ever=events, events=events)
        ns = f"mem-{name}-{'durable' if durable else 'plain'}"
        before = bench.used_memory()
        if name == "churn":
            _churn(bench, run, ns, logs[hours_before], hours_before, out.rss_empty_bytes, before)
        elif name.startswith("baseline"):
            _baseline(bench, run, ns, f"memory-{hours_before}", before)
        else:
            _flow(bench, run, ns, f"memory-{hours_before}", extra, out.rss_empty_bytes, before)
        run.redis_bytes_per_pair = run.redis_bytes / max(run.active_pairs, 1)
        out.runs.append(run)
        bench.log(f"memory, {name}{' durable' if durable else ''}: {events:,} messages, {run.pairs_ever:,} pairs "
                  f"ever, {run.active_pairs:,} active, {run.seconds:.1f} s; per active pair: RSS "
                  f"{rig.fmt(run.rss_bytes_per_pair, ',.0f')} B (peak {rig.fmt(run.peak_rss_bytes_per_pair, ',.0f')} "
                  f"B), Redis {rig.fmt(run.redis_bytes_per_pair, ',.0f')} B"
                  + (f" (window keys {run.redis_window_bytes_per_pair:,.0f} B)"
                     if run.redis_window_bytes_per_pair is not None else "")
                  + (f", recovery dir {run.recovery_dir_bytes_per_pair:,.0f} B" if durable else ""))
    bench.flush()


def _pairs_log(bench: ActivityBench, hours_before: int) -> Path:
    """The memory log with ``hours_before`` hours of churn, kept in ``data/``, produced to ``memory-H``."""
    cfg = bench.cfg
    path = bench.data / f"activity-memory-{cfg.memory_pairs}-{cfg.memory_workspaces}-c{hours_before}-s{cfg.seed}.jsonl"
    if not path.exists():
        bench.log(f"generating {path}")
        active_pairs_log(path.with_suffix(".tmp"), cfg.memory_pairs, cfg.memory_workspaces, hours_before, cfg.seed)
        path.with_suffix(".tmp").rename(path)
    bench.produce(path, f"memory-{hours_before}")
    return path


def _plan(bench: ActivityBench) -> Plan:
    cfg = bench.cfg
    plan: Plan = [("exact", 0, False, [])]
    if cfg.memory_durable:
        plan.append(("exact", 0, True, []))
    if cfg.memory_summary:
        plan.append(("summary", 0, False, ["--global-summary", str(cfg.memory_summary)]))
    plan.append(("baseline", 0, False, []))
    if cfg.memory_churn:
        plan.append(("churn", cfg.memory_churn, False, []))
        if cfg.memory_durable:
            plan.append(("churn", cfg.memory_churn, True, []))
        plan.append(("baseline_churn", cfg.memory_churn, False, []))
    return plan


def _flow(bench: ActivityBench, run: MemoryRun, ns: str, topic: str, extra: list[str], rss_empty: int,
          redis_before: int) -> None:
    keep = bench.work / f"{ns}.recovery"
    cmd = bench.flow_cmd(topic, ns, *extra, *(["--recovery-dir", str(keep)] if run.durable else []))
    run.seconds, run.rss_end_bytes, run.peak_rss_bytes = footprint(bench, cmd, ns, run.events)
    run.redis_bytes = bench.used_memory() - redis_before
    run.active_pairs = bench.flow_snapshot(ns)["active_pairs"]
    run.rss_bytes_per_pair = (run.rss_end_bytes - rss_empty) / max(run.active_pairs, 1)
    run.peak_rss_bytes_per_pair = (run.peak_rss_bytes - rss_empty) / max(run.active_pairs, 1)
    if run.durable:
        run.recovery_dir_bytes = rig.dir_bytes(keep)
        run.recovery_dir_bytes_per_pair = run.recovery_dir_bytes / max(run.active_pairs, 1)
        shutil.rmtree(keep, ignore_errors=True)


def _baseline(bench: ActivityBench, run: MemoryRun, ns: str, topic: str, redis_before: int) -> None:
    run.seconds = bench.rig.timed(bench.baseline_cmd(topic, ns, "--expire", "per-batch"), ns).seconds
    run.redis_bytes = bench.used_memory() - redis_before
    run.active_pairs = bench.cfg.memory_pairs
    run.redis_window_bytes_per_pair = _baseline_window_bytes(bench, ns) / run.active_pairs


def _churn(bench: ActivityBench, run: MemoryRun, ns: str, path: Path, hours_before: int, rss_empty: int,
           redis_before: int) -> None:
    keep = bench.work / f"{ns}.recovery"
    run.stages = staged(bench, ns, path, bench.cfg.memory_pairs, hours_before + 1, keep if run.durable else None,
                        rss_empty, redis_before)
    last = run.stages[-1]
    run.seconds = sum(st["seconds"] for st in run.stages)
    run.active_pairs, run.rss_end_bytes = last["active_pairs"], last["rss_bytes"]
    run.peak_rss_bytes = max(st["peak_rss_bytes"] for st in run.stages)
    run.redis_bytes, run.recovery_dir_bytes = last["redis_bytes"], last["recovery_dir_bytes"]
    run.rss_bytes_per_pair = last["rss_bytes_per_pair"]
    run.peak_rss_bytes_per_pair = (run.peak_rss_bytes - rss_empty) / max(run.active_pairs, 1)
    if run.durable:
        run.recovery_dir_bytes_per_pair = last["recovery_dir_bytes_per_pair"]
        shutil.rmtree(keep, ignore_errors=True)


def _published(bench: ActivityBench, namespace: str) -> int:
    """The messages the flow of ``namespace`` has published (the sum of its positions)."""
    return sum(int(v) for v in bench.client.hvals(Keys(activity_namespace(namespace)).positions))


def _until_published(bench: ActivityBench, proc: Any, namespace: str, events: int, timeout: float) -> int:
    """Wait until the flow has published ``events`` messages; its peak RSS (``VmHWM``) meanwhile."""
    peak = [0]

    def done() -> bool:
        peak[0] = max(peak[0], rig.proc_status(proc.pid, "VmHWM"))
        return _published(bench, namespace) >= events

    rig.wait_until(done, timeout, proc, f"the flow did not publish {events:,} messages", rig.POLL_S,
                   bench.rig.stderr(namespace))
    return peak[0]


def staged(bench: ActivityBench, namespace: str, path: Path, pairs: int, hours: int, keep: Path | None,
           rss_empty: int, redis_before: int) -> list[dict[str, Any]]:
    """The churn log fed one hour at a time to a live flow: after each hour is published,
    with nothing left to read, its RSS, Redis and recovery directory (a reading with the
    rest of the log in the topic would hold the Kafka client's read-ahead too)."""
    topic = f"staged-{namespace}"
    ensure_topic(bench.brokers, topic, bench.cfg.partitions)
    cmd = bench.flow_cmd(topic, namespace, *(["--recovery-dir", str(keep)] if keep is not None else []))
    proc = bench.rig.start(cmd, namespace)
    stages: list[dict[str, Any]] = []
    try:
        with open(path, "rb") as f:
            for hour in range(hours):
                lines = [f.readline().rstrip(b"\n") for _ in range(pairs)]
                started = time.perf_counter()
                produce_lines(bench.brokers, topic, lines)
                del lines
                peak = _until_published(bench, proc, namespace, (hour + 1) * pairs, 1800)
                seconds = time.perf_counter() - started
                time.sleep(2.0)
                active = bench.flow_snapshot(namespace)["active_pairs"]
                st = {"hour": hour, "pairs_ever": (hour + 1) * pairs, "active_pairs": active, "seconds": seconds,
                      "rss_bytes": rig.proc_status(proc.pid, "VmRSS"),
                      "peak_rss_bytes": max(peak, rig.proc_status(proc.pid, "VmHWM")),
                      "redis_bytes": bench.used_memory() - redis_before,
                      "recovery_dir_bytes": rig.dir_bytes(keep) if keep is not None else 0}
                st["rss_bytes_per_pair"] = (st["rss_bytes"] - rss_empty) / max(active, 1)
                st["redis_bytes_per_pair"] = st["redis_bytes"] / max(active, 1)
                st["recovery_dir_bytes_per_pair"] = st["recovery_dir_bytes"] / max(active, 1)
                stages.append(st)
                bench.log(f"  hour {hour}: {st['pairs_ever']:,} pairs ever, {active:,} active: RSS "
                          f"{st['rss_bytes_per_pair']:,.0f} B, Redis {st['redis_bytes_per_pair']:,.0f} B, "
                          f"recovery dir {st['recovery_dir_bytes_per_pair']:,.0f} B per active pair")
    finally:
        rig.stop(proc, 120)
    return stages


def footprint(bench: ActivityBench, cmd: list[str], namespace: str, events: int) -> tuple[float, int, int]:
    """Run the flow live until it has published all ``events`` messages of its topic, wait
    2 s, read its RSS, and stop it (SIGINT: its last barrier, recovery state written).
    (seconds until published, RSS then, peak RSS). A run with ``--until-eof`` exits as
    soon as it is done; live, its footprint once nothing is left to read is measurable
    (the peak also holds the Kafka client's read-ahead of the messages still to come)."""
    started = time.perf_counter()
    proc = bench.rig.start(cmd, namespace)
    try:
        peak = _until_published(bench, proc, namespace, events, 3600)
        seconds = time.perf_counter() - started
        time.sleep(2.0)
        rss, peak = rig.proc_status(proc.pid, "VmRSS"), max(peak, rig.proc_status(proc.pid, "VmHWM"))
    finally:
        rig.stop(proc, 120)
    return seconds, rss, peak


def _baseline_window_bytes(bench: ActivityBench, prefix: str) -> int:
    """``MEMORY USAGE`` of the baseline's keys in its window (the 60 buckets ending at its clock):
    what it holds live, once the TTLs of older buckets have run (a replay does not wait for them)."""
    client = bench.client
    clock = read_clock(client, prefix)
    if clock is None:
        return 0
    last = clock // BUCKET_MS
    total = 0
    batch: list[str] = []

    def flush_batch() -> int:
        pipe = client.pipeline(transaction=False)
        for k in batch:
            pipe.memory_usage(k, samples=0)
        got = sum(x or 0 for x in pipe.execute())
        batch.clear()
        return got

    for key in client.scan_iter(match=f"{prefix}:active:*", count=2000):
        b = key.decode().rsplit(":", 1)[1]
        if b.isdigit() and last - WINDOW_BUCKETS < int(b) <= last:
            batch.append(key)
            if len(batch) >= 5000:
                total += flush_batch()
    if batch:
        total += flush_batch()
    return total
