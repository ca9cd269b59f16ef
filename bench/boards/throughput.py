"""``bench-boards`` part 1, throughput: every system over one backlog, alternating, exact."""

from __future__ import annotations

import shutil
import statistics
from typing import Any

from rankflow.bench.boards.core import BoardsBench
from rankflow.bench.boards.logs import compare_boards
from rankflow.bench.boards.results import SYSTEMS, BoardsBenchResult, Run, Throughput
from rankflow.bench.boards_baseline import read_baseline_boards
from rankflow.connectors.board_read import read_boards

Boards = dict[str, dict[str, list[tuple[str, int, int]]]]
Reference = dict[str, dict[str, dict[str, int]]]


def throughput(bench: BoardsBench, result: BoardsBenchResult) -> None:
    cfg = bench.cfg
    out = result.throughput = Throughput()
    topic = "backlog"
    bench.produce(bench.score_log(cfg.results, cfg.players, cfg.games), topic)
    reference: Reference | None = None
    order = 0
    for rep in range(cfg.reps):
        systems = SYSTEMS if rep % 2 == 0 else tuple(reversed(SYSTEMS))  # the baseline first, then last
        for system in systems:
            run, view, boards, dead = _one(bench, system, topic, f"{system}-{rep}", order)
            order += 1
            out.dead_letters += dead
            if reference is None and boards is not None:
                reference = boards
            assert reference is not None  # every repetition starts or ends with the baseline
            _check(out, run, view, reference)
            del view
            out.runs.append(run)
            bench.log(f"{system} (rep {rep + 1}): {run.results_per_s:,.0f} results/s ({run.seconds:.1f} s; own "
                      f"{run.cpu_s:.1f} CPU-s, broker "
                      f"{run.broker_cpu_s:.1f} CPU-s, Redis {run.redis_cpu_s:.1f} CPU-s; peak RSS "
                      f"{run.peak_rss_bytes / 2**20:,.0f} MiB; {run.mismatches} mismatches)")
    for system in SYSTEMS:
        out.median_results_per_s[system] = statistics.median(r.results_per_s for r in out.runs if r.system == system)
    base = out.median_results_per_s["baseline"]
    out.ratio = out.median_results_per_s["flow"] / base
    out.durable_ratio = out.median_results_per_s["flow_durable"] / base
    for system in SYSTEMS:
        per_run = [r.cpu_s_per_1m(cfg.results) for r in out.runs if r.system == system]
        out.median_cpu_s_per_1m[system] = {k: round(statistics.median(c[k] for c in per_run), 3) for k in per_run[0]}
    base_cpu = out.median_cpu_s_per_1m["baseline"]["total"]
    out.cpu_ratio = out.median_cpu_s_per_1m["flow"]["total"] / base_cpu
    out.durable_cpu_ratio = out.median_cpu_s_per_1m["flow_durable"]["total"] / base_cpu
    bench.flush()
    bench.log(f"medians: {out.median_results_per_s}; flow/baseline {out.ratio:.2f}, durable {out.durable_ratio:.2f}; "
              f"mismatches {out.mismatches}; CPU per result x{out.cpu_ratio:.2f}, durable x{out.durable_cpu_ratio:.2f}")


def _one(bench: BoardsBench, system: str, topic: str, name: str,
         order: int) -> tuple[Run, Boards, Reference | None, int]:
    """One run of ``system`` on an empty Redis: its figures, its boards as the flow's,
    (the baseline's) its boards as the reference, and (the flow's) its dead letters."""
    bench.flush()
    before_mem = bench.used_memory()
    broker0, redis0 = bench.rig.services_cpu()
    timed = bench.rig.timed(bench.command(system, topic, name), name)
    broker1, redis1 = bench.rig.services_cpu()
    run = Run(system, order, timed.seconds, bench.cfg.results / timed.seconds, timed.peak_rss_bytes,
              broker1 - broker0, redis1 - redis0, 0, bench.used_memory() - before_mem, timed.cpu_s)
    if system == "baseline":
        boards = read_baseline_boards(bench.redis_url, name)
        view = {g: {b: [(p, s, 0) for p, s in e.items()] for b, e in bs.items()} for g, bs in boards.items()}
        return run, view, boards, 0
    view = read_boards(bench.client, name)
    dead = bench.work / f"{name}.dead.jsonl"
    dead_letters = sum(1 for _ in open(dead, "rb")) if dead.exists() else 0
    shutil.rmtree(bench.work / f"{name}.recovery", ignore_errors=True)
    return run, view, None, dead_letters


def _check(out: Throughput, run: Run, view: Boards, reference: Any) -> None:
    mismatches, boards, entries, dropped, examples = compare_boards(view, reference)
    run.mismatches = mismatches
    out.mismatches += mismatches
    out.boards_compared, out.entries_compared = boards, entries
    out.retention_dropped_boards = max(out.retention_dropped_boards, dropped)
    out.mismatch_examples.extend(f"{run.system}: {e}" for e in examples[: 10 - len(out.mismatch_examples)])
