"""``bench-activity`` part 5, error: the global summary's bounds against the true counts.

The flow with ``--global-summary N`` for each ``summaries`` value on the backlog: per
global item ``count_high - count_low`` and the true error of ``count_low`` (true counts
from the same run's exact workspace rankings), against ``T / N`` (docs/semantics/windows.md
5), and how much of the exact global top K the summary lists.
"""

from __future__ import annotations

import statistics

from rankflow.bench.activity.core import ActivityBench
from rankflow.bench.activity.results import ActivityBenchResult, Error, ErrorRun


def error(bench: ActivityBench, result: ActivityBenchResult) -> None:
    out = result.error = Error()
    topic = bench.backlog_topic()
    for n in bench.cfg.summaries:
        bench.flush()
        ns = f"error-{n}"
        seconds = bench.rig.timed(bench.flow_cmd(topic, ns, "--until-eof", "--global-summary", str(n)), ns).seconds
        run = _bounds(bench, ns, n, seconds)
        out.runs.append(run)
        bench.log(f"error, --global-summary {n}: T {run.total:,}, T/N {run.bound:,.1f}; count_high - count_low max "
                  f"{run.width_max:,} (mean {run.width_mean:,.1f}); true - count_low max {run.error_low_max:,} "
                  f"({run.error_low_max_relative:.2%}); {run.exact_items} of {run.k} items exact; exact top {run.k} "
                  f"listed {run.recall_top_k:.0%}; {run.violations} violations; {run.events_per_s:,.0f} events/s")
    bench.flush()


def _bounds(bench: ActivityBench, ns: str, n: int, seconds: float) -> ErrorRun:
    snap = bench.flow_snapshot(ns)
    true = bench.flow_all_counts(ns)  # the workspace rankings stay exact (docs/semantics/windows.md 5)
    total = sum(true.values())
    items = snap["global"]
    k = len(items)
    run = ErrorRun(n=n, total=total, bound=total / n, items=k, k=k, seconds=seconds,
                   events_per_s=bench.index().events / seconds)
    widths, errors, relative = [], [], []
    for item in items:
        pair = (item["workspace_id"], item["channel_id"])
        low, high, count = item["count_low"], item["count_high"], true.get(pair, 0)
        widths.append(high - low)
        errors.append(count - low)
        relative.append((count - low) / count if count else 0.0)
        run.error_high_max = max(run.error_high_max, high - count)
        if not (low <= count <= high) or high - low > total / n:
            run.violations += 1
    run.exact_items = sum(w == 0 for w in widths)
    run.width_max, run.width_mean = max(widths, default=0), statistics.fmean(widths) if widths else 0.0
    run.error_low_max = max(errors, default=0)
    run.error_low_mean = statistics.fmean(errors) if errors else 0.0
    run.error_low_max_relative = max(relative, default=0.0)
    exact = sorted(true.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:k]
    listed = {(i["workspace_id"], i["channel_id"]) for i in items}
    run.recall_top_k = sum(pair in listed for pair, _ in exact) / max(k, 1)
    return run
