"""``bench-activity`` part 3, queries: each system's reads while messages flow in, then idle.

Each system in turn, alone (two systems following the topic at once would measure each
one's reads under the other's load): it loads the backlog and follows the topic; per
workspace top 100 and channel lookups (workspaces and channels drawn from the window's
messages, so busy ones are asked more), each open-loop at ``queries_rate`` requests/s for
``queries_s``: ``ActivityReader.top``/``.channel`` on the flow's Redis, and the baseline's
read path (``BaselineReader``: the cached ``ZUNIONSTORE`` of 60 buckets, ``ZREVRANGE``/
``ZSCORE`` + ``ZREVRANK``); first while ``queries_traffic`` messages/s flow in, then with
the traffic stopped; a ``GET`` of one key as the control of what the machine gives any
read meanwhile.
"""

from __future__ import annotations

import gc
import os
import random
import threading
import time
from subprocess import Popen
from typing import Any
from collections.abc import Callable

import redis

from rankflow.bench import rig
from rankflow.bench.activity.core import ActivityBench
from rankflow.bench.activity.logs import LogIndex
from rankflow.bench.activity.results import ActivityBenchResult, Queries
from rankflow.bench.activity_baseline import BUCKET_MS, BaselineReader, read_clock, read_positions
from rankflow.connectors.redis_keys import Keys, activity_namespace

IDLE_QUERIES_S = 10.0
"""Seconds of each query's load once the traffic stopped (nothing changes then)."""

NS, PREFIX = "queries", "queries-baseline"  # the flow's namespace, the baseline's prefix

MakeCall = Callable[[], tuple[Callable[[int], bool], Callable[[], Any]]]


def queries(bench: ActivityBench, result: ActivityBenchResult) -> None:
    cfg = bench.cfg
    out = result.queries = Queries(rate=cfg.queries_rate, seconds=cfg.queries_s, traffic_rate=cfg.queries_traffic,
                                   publish_stage=cfg.publish_stage)
    topic = bench.backlog_topic()
    index = bench.index()
    for system in ("flow", "baseline"):
        bench.flush()
        _queries_of(bench, system, topic, index, out)
    bench.flush()


def _queries_of(bench: ActivityBench, system: str, topic: str, index: LogIndex, out: Queries) -> None:
    cfg = bench.cfg
    name = f"queries-{system}"
    cmd = bench.flow_cmd(topic, NS) if system == "flow" else \
        bench.baseline_cmd(topic, PREFIX, "--follow", "--expire", "per-batch")
    proc = bench.rig.start(cmd, name)
    flow_log = bench.rig.stderr(name)  # the flow's log: what its publisher staged
    feeder = None
    stop_clock = threading.Event()
    try:
        _load(bench, system, topic, proc, name)
        start_ms, end_ms, clock = _window(bench, system)
        bench.log(f"{system}: backlog loaded; window [{start_ms}, {end_ms})")
        asked = _asked(index, start_ms, end_ms, cfg.seed)
        out.workspaces_asked = len({ws for ws, _ in asked})
        # traffic: the same kind of log, after what the topic holds, event time at the wall clock's pace
        traffic_n = int(cfg.queries_traffic * (cfg.queries_s * 3 + 30))
        traffic = bench.message_log(traffic_n, float(cfg.queries_traffic), start_ms=clock + 1)
        holder = {"clock": clock}
        if system == "baseline":
            threading.Thread(target=_follow_clock, args=(bench.redis_url, holder, stop_clock), daemon=True).start()
        # The readers share this process with the log's index (millions of objects): a full
        # collection of those would stall every reader, which measures this process, not Redis.
        gc.collect()
        gc.freeze()
        feeder = rig.spawn(rig.paced_child, bench.brokers, topic, str(traffic), cfg.queries_traffic, "user_id",
                           None, 0, time.time() + cfg.queries_s * 3 + 25)
        time.sleep(3.0)
        pids = {system: proc.pid, **bench.rig.services_pids(), "feeder": feeder.pid, "bench (readers)": os.getpid()}
        readers = {f"{system} top": _reader(bench, system, "top", asked, holder),
                   f"{system} channel": _reader(bench, system, "channel", asked, holder),
                   "control GET" if system == "flow" else "control GET, baseline's turn": _control(bench)}
        seen = len(flow_log.read_text().splitlines()) if system == "flow" else 0
        for phase in ("traffic", "idle"):
            if phase == "idle":
                rig.end_child(feeder)
                del pids["feeder"]
                time.sleep(3.0)
            _phase(bench, out, system, phase, pids, readers)
            if system == "flow":  # what the publisher did meanwhile (its log: staged, or in a hurry)
                lines = flow_log.read_text().splitlines()
                out.flow_publishes[phase] = [ln.split("] ", 1)[-1] for ln in lines[seen:]
                                             if "rankflow.publisher" in ln]
                seen = len(lines)
                bench.log(f"{phase}: the flow's publisher: {out.flow_publishes[phase] or 'nothing staged'}")
    finally:
        gc.unfreeze()
        stop_clock.set()
        rig.end_child(feeder)
        rig.stop(proc)


def _load(bench: ActivityBench, system: str, topic: str, proc: Popen, name: str) -> None:
    """Wait until ``system`` has read everything the topic holds."""
    total = bench.topic_messages(topic)

    def at() -> int:
        if system == "flow":
            return sum(int(v) for v in bench.client.hvals(Keys(activity_namespace(NS)).positions))
        return sum(read_positions(bench.client, PREFIX).values())

    rig.wait_until(lambda: at() >= total, 900, proc, f"the {system} stopped while loading, or did not load the "
                   "backlog in 15 minutes", 0.5, bench.rig.stderr(name))
    time.sleep(1.0)
    bench.log(f"{system}: {total:,} messages loaded")


def _window(bench: ActivityBench, system: str) -> tuple[int, int, int]:
    """The window the system holds now, [start, end) ms, and its clock."""
    if system == "flow":
        snap = bench.flow_snapshot(NS)
        return snap["window_start"], snap["window_end"], snap["watermark"]
    clock = read_clock(bench.client, PREFIX) or 0
    end_ms = (clock // BUCKET_MS + 1) * BUCKET_MS
    return end_ms - 60 * BUCKET_MS, end_ms, clock


def _asked(index: LogIndex, start_ms: int, end_ms: int, seed: int) -> list[tuple[str, str]]:
    """What readers ask for: the workspaces and channels of the window's messages (busy ones more often)."""
    rng = random.Random(seed)
    asked = [(ws, ch) for ws, chs in index.by_workspace.items() for (ch, b), n in chs.items()
             if start_ms // BUCKET_MS <= b < end_ms // BUCKET_MS for _ in range(n)]
    return rng.sample(asked, min(20_000, len(asked)))


def _follow_clock(redis_url: str, holder: dict[str, int], stop: threading.Event) -> None:
    """The baseline's "now": its consumer's clock."""
    c = redis.Redis.from_url(redis_url)
    while not stop.wait(0.5):
        holder["clock"] = read_clock(c, PREFIX) or holder["clock"]
    c.close()


def _reader(bench: ActivityBench, system: str, query: str, asked: list[tuple[str, str]],
            holder: dict[str, int]) -> MakeCall:
    """A :func:`rig.paced_load` client: the flow's ``ActivityReader`` or the baseline's reader."""
    from rankflow.connectors.activity_read import ActivityReader, NoCount

    def make() -> tuple[Callable[[int], bool], Callable[[], Any]]:
        client = redis.Redis.from_url(bench.redis_url)
        if system == "flow":
            flow = ActivityReader(client, NS)

            def call(i: int) -> bool:
                ws, ch = asked[i % len(asked)]
                if query == "top":
                    return bool(flow.top(ws, 100)["items"])
                try:
                    flow.channel(ws, ch)
                    return True
                except NoCount:
                    return False
            return call, client.close
        base = BaselineReader(client, PREFIX, now_ms=lambda: holder["clock"])

        def base_call(i: int) -> bool:
            ws, ch = asked[i % len(asked)]
            if query == "top":
                return bool(base.top(ws, 100))
            return base.channel(ws, ch) is not None
        return base_call, client.close
    return make


def _control(bench: ActivityBench) -> MakeCall:
    """What any read gets from this Redis on this machine meanwhile: a GET of one key."""
    def make() -> tuple[Callable[[int], bool], Callable[[], Any]]:
        client = redis.Redis.from_url(bench.redis_url)
        key = Keys(activity_namespace(NS)).snapshot_id

        def call(i: int) -> bool:
            return client.get(key) is not None
        return call, client.close
    return make


def _phase(bench: ActivityBench, out: Queries, system: str, phase: str, pids: dict[str, int | None],
           readers: dict[str, MakeCall]) -> None:
    """Each reader's load in turn; the CPU every process used meanwhile and Redis's slow commands."""
    cfg = bench.cfg
    rig.slowlog_reset(bench.client)
    meter = rig.CpuMeter(pids, machine=True)
    got = out.phases.setdefault(phase, {})
    seconds = cfg.queries_s if phase == "traffic" else min(cfg.queries_s, IDLE_QUERIES_S)
    for name, make in readers.items():
        got[name] = latency = rig.paced_load(make, cfg.queries_rate, seconds)
        bench.log(f"{phase}, {name}: {latency.achieved_rps:,.0f} req/s, p50 {rig.fmt(latency.p50_ms, '.2f')} "
                  f"ms, p99 {rig.fmt(latency.p99_ms, '.2f')} ms, max {rig.fmt(latency.max_ms, '.1f')} ms, "
                  f"{latency.errors} errors, {latency.not_found} found nothing")
    key = phase if system == "flow" else f"{phase}, baseline's turn"
    out.cpu_cores[key] = meter.cores()
    out.redis_slow[key] = _slowlog(bench)
    bench.log(f"{key}: CPU cores {out.cpu_cores[key]}; Redis commands over 1 ms {out.redis_slow[key]}")


def _slowlog(bench: ActivityBench) -> dict[str, Any]:
    """Commands that kept Redis busy over 1 ms since the reset, by script or command."""
    from rankflow.bench.activity_baseline import READ_LUA
    from rankflow.connectors.redis_scripts import (ACTIVITY_READ_LUA, DROP_ACTIVITY_LUA, PUBLISH_ACTIVITY_LUA,
                                                   STAGE_ACTIVITY_LUA)

    return rig.slowlog_by_command(bench.client, {PUBLISH_ACTIVITY_LUA: "EVALSHA (flow publish)",
                                                 STAGE_ACTIVITY_LUA: "EVALSHA (flow staging)",
                                                 DROP_ACTIVITY_LUA: "EVALSHA (flow freeing staged slots)",
                                                 ACTIVITY_READ_LUA: "EVALSHA (flow query)",
                                                 READ_LUA: "EVALSHA (baseline query: ZUNIONSTORE when stale)"})
