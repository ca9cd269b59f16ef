"""``bench-activity`` part 1, throughput: every system over one backlog, alternating, exact.

Exactness: for a sample of workspaces (the busiest and ``compare_workspaces`` drawn at
random) every run's counts over the flow's final published window equal a count made
from the log. The baseline has no watermark: its counts are read over the same buckets.
"""

from __future__ import annotations

import shutil
import statistics

from rankflow.bench import rig
from rankflow.bench.activity.core import ActivityBench
from rankflow.bench.activity.logs import LogIndex, compare
from rankflow.bench.activity.results import SYSTEMS, ActivityBenchResult, Run, Throughput
from rankflow.bench.activity_baseline import BUCKET_MS

Counts = dict[str, dict[str, int]]  # workspace -> channel -> count
Buckets = dict[str, dict[tuple[str, int], int]]  # workspace -> (channel, bucket) -> count


def throughput(bench: ActivityBench, result: ActivityBenchResult) -> None:
    cfg = bench.cfg
    out = result.throughput = Throughput()
    topic = bench.backlog_topic()
    index = bench.index()
    sample = index.sample(cfg.compare_workspaces, cfg.seed)
    out.log_events, out.pairs_in_log = index.events, index.pairs
    systems = [s for s in SYSTEMS if cfg.durable or s != "flow_durable"]
    window: tuple[int, int] | None = None
    flow_views: list[tuple[Run, Counts]] = []
    baseline_views: list[tuple[Run, Buckets]] = []
    order = 0
    for rep in range(cfg.reps):
        for system in (systems if rep % 2 == 0 else list(reversed(systems))):
            name = f"{system}-{rep}"
            run = _one(bench, system, topic, name, order, index.events)
            order += 1
            if system.startswith("flow"):
                window = _flow_window(bench, out, run, name, window)
                flow_views.append((run, bench.flow_counts(name, sample)))
                shutil.rmtree(bench.work / f"{name}.recovery", ignore_errors=True)
            else:  # every bucket of the log: the window is known once a flow has run
                baseline_views.append((run, bench.baseline_buckets(name, sample, *index.buckets)))
            out.runs.append(run)
            bench.log(f"{system} (rep {rep + 1}): {run.events_per_s:,.0f} events/s ({run.seconds:.1f} s, its own CPU "
                      f"{run.cpu_s:.1f} s; dead letters {run.dead_letters or 0}; broker "
                      f"{run.broker_cpu_s:.1f} CPU-s, Redis {run.redis_cpu_s:.1f} CPU-s; peak RSS "
                      f"{run.peak_rss_bytes / 2**20:,.0f} MiB)")
    assert window is not None
    _check(out, index, sample, window, flow_views, baseline_views)
    for system in systems:
        out.median_events_per_s[system] = statistics.median(r.events_per_s for r in out.runs if r.system == system)
    m = out.median_events_per_s
    out.ratio, out.ratio_lean = m["flow"] / m["baseline"], m["flow"] / m["baseline_lean"]
    if "flow_durable" in m:
        out.durable_ratio, out.durable_ratio_lean = m["flow_durable"] / m["baseline"], \
            m["flow_durable"] / m["baseline_lean"]
    for system in systems:
        per_run = [rig.cpu_per_million(r.cpu_s, r.redis_cpu_s, r.broker_cpu_s, index.events)
                   for r in out.runs if r.system == system]
        out.median_cpu_s_per_1m[system] = {k: round(statistics.median(c[k] for c in per_run), 3) for k in per_run[0]}
    c = out.median_cpu_s_per_1m
    out.cpu_ratio_lean = c["flow"]["total"] / c["baseline_lean"]["total"]
    if "flow_durable" in c:
        out.durable_cpu_ratio_lean = c["flow_durable"]["total"] / c["baseline_lean"]["total"]
    bench.flush()
    bench.log(f"CPU-s per 1M messages: {c}; flow/lean x{out.cpu_ratio_lean:.2f}, durable "
              f"x{out.durable_cpu_ratio_lean:.2f}")
    bench.log(f"medians: {m}; flow/baseline {out.ratio:.2f} (lean {out.ratio_lean:.2f}), durable "
              f"{out.durable_ratio:.2f} (lean {out.durable_ratio_lean:.2f}); {out.pairs_compared:,} pairs of "
              f"{out.workspaces_compared} workspaces compared, mismatches {out.mismatches}")


def _one(bench: ActivityBench, system: str, topic: str, name: str, order: int, events: int) -> Run:
    """One run of ``system`` on an empty Redis, timed, with the CPU beside it."""
    bench.flush()
    before_mem = bench.used_memory()
    broker0, redis0 = bench.rig.services_cpu()
    timed = bench.rig.timed(bench.command(system, topic, name), name)
    broker1, redis1 = bench.rig.services_cpu()
    return Run(system, order, timed.seconds, events / timed.seconds, timed.peak_rss_bytes, broker1 - broker0,
               redis1 - redis0, 0, bench.used_memory() - before_mem, timed.cpu_s)


def _flow_window(bench: ActivityBench, out: Throughput, run: Run, name: str,
                 window: tuple[int, int] | None) -> tuple[int, int]:
    """The flow's final window (in buckets; every run's must be the same) and its dead letters."""
    snap = bench.flow_snapshot(name)
    mine = (snap["window_start"] // BUCKET_MS, snap["window_end"] // BUCKET_MS - 1)
    if window is not None and mine != window:
        raise RuntimeError(f"{name}: final window {mine}, an earlier run's {window}")
    out.window = [snap["window_start"], snap["window_end"]]
    out.active_pairs = snap["active_pairs"]
    run.dead_letters = bench.dead_letters(name)
    out.dead_letters += sum(run.dead_letters.values())
    out.dead_letters_not_expired += sum(n for r, n in run.dead_letters.items() if r != "expired")
    return mine


def _check(out: Throughput, index: LogIndex, sample: list[str], window: tuple[int, int],
           flow_views: list[tuple[Run, Counts]], baseline_views: list[tuple[Run, Buckets]]) -> None:
    """Every run's counts of the sampled workspaces over ``window`` against the log's."""
    first, last = window
    want = {ws: index.window(ws, first, last) for ws in sample}
    views: list[tuple[Run, Counts]] = list(flow_views)
    for run, buckets in baseline_views:
        counts: Counts = {}
        for ws, entries in buckets.items():
            mine = counts[ws] = {}
            for (ch, b), n in entries.items():
                if first <= b <= last:
                    mine[ch] = mine.get(ch, 0) + n
        views.append((run, counts))
    for run, counts in views:
        bad, compared, examples = compare(counts, want)
        run.mismatches = bad
        out.mismatches += bad
        out.pairs_compared = compared
        out.mismatch_examples += [f"{run.system}: {e}" for e in examples][:10 - len(out.mismatch_examples)]
    out.workspaces_compared = len(sample)
