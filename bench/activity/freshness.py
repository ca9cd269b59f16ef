"""``bench-activity`` part 2, freshness: at each steady rate, from a message's send to when it counts.

For each ``rates`` value, messages produced at that steady rate (from a child process)
for ``steady_s`` while one system follows the topic. The flow: from a message's send to
the first published snapshot whose positions include it (a poller reads the positions
every 10 ms). The baseline: to the first pipeline that applied it (its positions,
written after the increments) and, for the messages of the busiest workspaces, which a
reader queries continuously, to the first refresh of the workspace's cached union (5 s)
that includes it: the seed's "counted in a published ranking".
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from subprocess import Popen

import orjson
import redis

from rankflow.bench import rig
from rankflow.bench.activity.core import ActivityBench
from rankflow.bench.activity.results import ActivityBenchResult, Freshness, FreshnessRun
from rankflow.bench.activity_baseline import BaselineKeys, BaselineReader, read_clock
from rankflow.connectors.kafka import ensure_topic
from rankflow.connectors.redis_keys import Keys, activity_namespace


class RefreshReader(threading.Thread):
    """The seed's readers of the busiest workspaces: each read every ``interval`` s through the
    cached union; keeps, per workspace, when a read refreshed the union (the cache had expired)
    and the consumer positions the refresh included (read in the same MULTI)."""

    def __init__(self, redis_url: str, prefix: str, workspaces: list[str], interval: float = 0.1) -> None:
        super().__init__(name="refresh-reader", daemon=True)
        self.client = redis.Redis.from_url(redis_url)
        self.prefix, self.workspaces, self.interval = prefix, workspaces, interval
        self.keys = BaselineKeys(prefix)
        self.clock = 0
        self.reader = BaselineReader(self.client, prefix, now_ms=lambda: self.clock)
        self.refreshes: dict[str, rig.Seen] = {ws: [] for ws in workspaces}
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.is_set():
            self.clock = read_clock(self.client, self.prefix) or 0
            for ws in self.workspaces:
                pipe = self.client.pipeline(transaction=True)
                pipe.hgetall(self.keys.positions)
                pipe.exists(self.keys.top(ws))
                self.reader._script(keys=self.reader._keys(ws), args=[self.reader.cache_ms, "top", 100, ""],
                                    client=pipe)
                positions, cached, _ = pipe.execute()
                if not cached:
                    self.refreshes[ws].append((time.time(), {k.decode(): int(v) for k, v in positions.items()}))
            time.sleep(self.interval)
        self.client.close()


def freshness(bench: ActivityBench, result: ActivityBenchResult) -> None:
    cfg = bench.cfg
    out = result.freshness = Freshness()
    most = int(max(cfg.rates) * cfg.steady_s)
    # event time advances as fast as the wall clock at the highest rate
    path = bench.message_log(most, float(max(cfg.rates)))
    by_line_ws = [orjson.loads(line)["workspace_id"] for line in rig.read_lines(path, most)]
    busiest = [ws for ws, _ in Counter(by_line_ws).most_common(cfg.fresh_read_workspaces)]
    for rate in cfg.rates:
        for system in ("flow", *(("flow_durable",) if cfg.durable else ()), "baseline"):
            run = FreshnessRun(system, rate)
            paced, poller, refresher = _follow(bench, run, str(path), busiest)
            _figures(run, cfg.steady_s, paced, poller, refresher, f"steady-{system}-{rate}", busiest, by_line_ws)
            out.runs.append(run)
            bench.log(f"freshness, {system} at {run.achieved_rate:,.0f}/s: p50 {rig.fmt(run.p50_s, '.3f')} s, p99 "
                      f"{rig.fmt(run.p99_s, '.3f')} s ({run.seen} of {run.samples} samples; caught up "
                      f"{rig.fmt(run.caught_up_s, '.1f')} s after the last message)"
                      + ("" if refresher is None else f"; in a refreshed union p50 "
                         f"{rig.fmt(run.published_p50_s, '.2f')} s, p99 {rig.fmt(run.published_p99_s, '.2f')} s "
                         f"({run.published_samples} samples)") + f"; CPU cores {run.cpu_cores}")
    bench.flush()


def _start(bench: ActivityBench, system: str, rate: int, topic: str,
           busiest: list[str]) -> tuple[Popen, rig.PositionsPoller, RefreshReader | None]:
    """``system`` following ``topic`` live, and what watches it."""
    name = f"fresh-{system}-{rate}"
    if system.startswith("flow"):
        durable = ["--recovery-dir", str(bench.work / f"fresh-{rate}.recovery")] if system == "flow_durable" else []
        proc = bench.rig.start(bench.flow_cmd(topic, "fresh", *durable), name)
        poller = rig.PositionsPoller.of_hash(bench.redis_url, Keys(activity_namespace("fresh")).positions)
        poller.start()
        rig.wait_until(lambda: bool(poller.seen), 60, proc, "the flow did not start", 0.05, bench.rig.stderr(name))
        return proc, poller, None
    proc = bench.rig.start(bench.baseline_cmd(topic, "fresh", "--follow"), name)
    poller = rig.PositionsPoller.of_hash(bench.redis_url, BaselineKeys("fresh").positions)
    poller.start()
    refresher = RefreshReader(bench.redis_url, "fresh", busiest)
    time.sleep(2.0)  # the consumer is assigned its partitions
    refresher.start()
    return proc, poller, refresher


def _follow(bench: ActivityBench, run: FreshnessRun, path: str,
            busiest: list[str]) -> tuple[rig.Paced, rig.PositionsPoller, RefreshReader | None]:
    """Produce ``run.rate`` messages/s for ``steady_s`` while ``run.system`` follows; until all are in."""
    cfg = bench.cfg
    total = int(run.rate * cfg.steady_s)
    topic = f"steady-{run.system}-{run.rate}"
    ensure_topic(bench.brokers, topic, cfg.partitions)
    bench.flush()
    samples_path = bench.work / f"samples-{run.system}-{run.rate}.json"
    proc, poller, refresher = None, None, None
    try:
        proc, poller, refresher = _start(bench, run.system, run.rate, topic, busiest)
        bench.log(f"{run.system}: producing {total:,} messages at {run.rate:,}/s")
        meter = rig.CpuMeter({run.system: proc.pid, **bench.rig.services_pids()})
        producer = rig.spawn(rig.paced_child, bench.brokers, topic, path, run.rate, "user_id", total,
                             max(1, total // 5000), None, str(samples_path))
        producer_cpu = 0.0
        while producer.is_alive():
            producer_cpu = max(producer_cpu, rig.cpu_seconds(producer.pid) if producer.pid else 0.0)
            time.sleep(0.2)
        producer.join()
        ended = time.time()
        if rig.wait_until(lambda: poller.total() >= total, 120):
            run.caught_up_s = max(0.0, poller.seen[-1][0] - ended)
        run.cpu_cores = meter.cores()
        run.cpu_cores["producer"] = round(producer_cpu / meter.wall, 3)
        time.sleep(0.3)
        if refresher is not None:
            time.sleep(5.5)  # one more refresh of every read workspace
    finally:
        if poller is not None:
            poller.finish()
        if refresher is not None:
            refresher.stop_event.set()
            refresher.join()
        if proc is not None:
            rig.stop(proc)
    produced = orjson.loads(samples_path.read_bytes())
    return rig.Paced(**produced), poller, refresher


def _figures(run: FreshnessRun, steady_s: float, paced: rig.Paced, poller: rig.PositionsPoller,
             refresher: RefreshReader | None, topic: str, busiest: list[str], by_line_ws: list[str]) -> None:
    """The run's figures from what was sent (``paced``) and what was seen when."""
    run.seconds = paced.seconds
    run.achieved_rate = int(run.rate * steady_s) / paced.seconds
    samples = paced.sent()
    latencies = list(rig.first_covering(poller.seen, topic, samples).values())
    run.samples, run.seen = len(samples), len(latencies)
    run.p50_s, run.p99_s = rig.percentile(latencies, 0.5), rig.percentile(latencies, 0.99)
    run.max_s = max(latencies, default=None)
    if refresher is not None:
        published: list[float] = []
        for ws in busiest:
            mine = {(p, o): at for p, o, at, i in paced.samples if by_line_ws[i] == ws}
            run.published_samples += len(mine)
            published += rig.first_covering(refresher.refreshes[ws], topic, mine).values()
        run.published_p50_s = rig.percentile(published, 0.5)
        run.published_p99_s = rig.percentile(published, 0.99)
        run.published_max_s = max(published, default=None)
