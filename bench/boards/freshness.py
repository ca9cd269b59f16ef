"""``bench-boards`` part 2, freshness: from a result's send to a published snapshot that holds it."""

from __future__ import annotations

import threading
import time
from typing import cast

import orjson

from rankflow.bench import rig
from rankflow.bench.boards.core import BoardsBench
from rankflow.bench.boards.results import BoardsBenchResult, Freshness
from rankflow.connectors.kafka import ensure_topic
from rankflow.connectors.redis_keys import Keys, boards_namespace
from rankflow.connectors.redis_replies import Entries


def freshness(bench: BoardsBench, result: BoardsBenchResult) -> None:
    """A producer thread sends results at a steady rate while the flow follows the topic; a
    poller reads the published snapshot id and positions every 10 ms."""
    cfg = bench.cfg
    out = result.freshness = Freshness(rate=cfg.rate)
    total = int(cfg.rate * cfg.steady_s)
    lines = rig.read_lines(bench.score_log(total, cfg.players, cfg.games))
    topic, ns = "steady", "fresh"
    keys = Keys(boards_namespace(ns))
    ensure_topic(bench.brokers, topic, cfg.partitions)
    bench.flush()
    proc = bench.rig.start(bench.flow_cmd(topic, ns), ns)
    poller = rig.PositionsPoller.of_snapshot(bench.redis_url, keys.snapshot_id, keys.positions)
    poller.start()
    try:
        rig.wait_until(lambda: bool(poller.seen), 60, proc, "the flow did not start publishing", 0.05,
                       bench.rig.stderr(ns))
        bench.log(f"producing {total:,} results at {cfg.rate:,}/s while the flow follows the topic")
        sent: list[rig.Paced] = []
        producer = threading.Thread(target=lambda: sent.append(rig.produce_paced(
            bench.brokers, topic, lines, cfg.rate, "player_id", max(1, total // 5000))), daemon=True)
        producer.start()
        producer.join()
        paced = sent[0]
        out.seconds, out.achieved_rate = paced.flushed_s, total / paced.flushed_s
        rig.wait_until(lambda: poller.total() >= total, 120)
        time.sleep(0.3)
    finally:
        poller.finish()
        rig.stop(proc)
    samples = paced.sent()
    latencies = list(rig.first_covering(poller.seen, topic, samples).values())
    out.samples, out.seen = len(samples), len(latencies)
    out.p50_s, out.p99_s = rig.percentile(latencies, 0.5), rig.percentile(latencies, 0.99)
    out.max_s = max(latencies, default=None)
    history = [(orjson.loads(f[b"snapshot"])) for _, f in cast(Entries, bench.client.xrange(keys.stream))]
    published = [(s["published_at"] / 1000, s["positions"]) for s in history]
    by_published = list(rig.first_covering(published, topic, samples).values())
    out.published_p50_s, out.published_p99_s = rig.percentile(by_published, 0.5), rig.percentile(by_published, 0.99)
    bench.flush()
    bench.log(f"freshness at {out.achieved_rate:,.0f}/s: p50 {rig.fmt(out.p50_s, '.3f')} s, p99 "
              f"{rig.fmt(out.p99_s, '.3f')} s, max {rig.fmt(out.max_s, '.3f')} s ({out.seen} of {out.samples} samples)")
