"""``rankflow bench-activity``: its table, its chart and its result files."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from rankflow.bench import rig
from rankflow.bench.activity.results import (AIM_FRESHNESS_P99_S, PARTS, SYSTEMS, TARGET_FRESHNESS_P99_S,
                                             TARGET_CPU_RATIO, TARGET_QUERY_P99_MS, TARGET_RATIO, ActivityBenchResult, Error, Freshness,
                                             Memory, Queries, Throughput, targets)
from rankflow.bench.rig import fmt as _fmt

Row = tuple[str, str, str, str]  # what, flow, baseline, target


def _met(ok: bool | None) -> str:
    return "met" if ok else "MISSED"


def _throughput_rows(r: ActivityBenchResult, t: dict[str, Any], out: list[Row]) -> None:
    assert r.throughput is not None
    th, m = r.throughput, r.throughput.median_events_per_s
    runs = lambda s: " / ".join(f"{x.events_per_s:,.0f}" for x in th.runs if x.system == s)  # noqa: E731
    durable = f"; durable {m['flow_durable']:,.0f} ({runs('flow_durable')})" if "flow_durable" in m else ""
    out.append((f"events/s, {th.log_events:,}-message backlog, {r.config.get('partitions')} partitions "
                f"(median; each run)",
                f"{m['flow']:,.0f} ({runs('flow')}){durable}",
                f"seed {m['baseline']:,.0f} ({runs('baseline')}); lean {m['baseline_lean']:,.0f} "
                f"({runs('baseline_lean')})",
                f"flow/seed {th.ratio:.2f}, /lean {th.ratio_lean:.2f}; durable {th.durable_ratio:.2f}, "
                f"/lean {th.durable_ratio_lean:.2f} (>= {TARGET_RATIO:g}): plain {_met(t.get('ratio_met'))}, "
                f"durable {_met(t.get('durable_ratio_met'))}"))
    if th.median_cpu_s_per_1m:
        c = th.median_cpu_s_per_1m
        cpu = lambda s: (f"{c[s]['own']:.1f} + {c[s]['redis']:.1f} + {c[s]['broker']:.1f} = {c[s]['total']:.1f}"  # noqa: E731
                         if s in c else "-")
        out.append(("CPU-s per 1M messages, own + Redis + broker (median)",
                    f"{cpu('flow')}; durable {cpu('flow_durable')}",
                    f"seed {cpu('baseline')}; lean {cpu('baseline_lean')}",
                    f"flow/lean x{th.cpu_ratio_lean:.2f}, durable x{th.durable_cpu_ratio_lean:.2f} "
                    f"(<= {TARGET_CPU_RATIO:g}): {_met(t.get('durable_cpu_ratio_met'))}"))
    out.append(("exactness: window counts of sampled workspaces vs a count of the log",
                f"{th.mismatches} mismatches over {len(th.runs)} runs ({th.workspaces_compared} workspaces, "
                f"{th.pairs_compared:,} pairs each; {th.active_pairs:,} active pairs of {th.pairs_in_log:,}); "
                f"{th.dead_letters:,} dead letters, all but {th.dead_letters_not_expired} expired ("
                + ", ".join(f"{x.system} {sum(x.dead_letters.values()):,}" for x in th.runs
                            if x.system.startswith("flow")) + ")", "the same window's buckets",
                "0: " + _met(t.get("exact"))))


def _freshness_rows(r: ActivityBenchResult, t: dict[str, Any], out: list[Row]) -> None:
    assert r.freshness is not None
    for f in r.freshness.runs:
        if f.system.startswith("flow"):
            out.append((f"freshness{' (durable)' if f.system == 'flow_durable' else ''} at "
                        f"{f.achieved_rate:,.0f} events/s (produced -> in a published snapshot)",
                        f"p50 {_fmt(f.p50_s, '.2f', ' s')}, p99 {_fmt(f.p99_s, '.2f', ' s')}, max "
                        f"{_fmt(f.max_s, '.2f', ' s')} ({f.seen} of {f.samples} samples; caught up "
                        f"{_fmt(f.caught_up_s, '.1f', ' s')} after the last)", "",
                        f"p99 < {TARGET_FRESHNESS_P99_S:g} s: "
                        f"{_met(t.get(f'{f.system}_freshness_met_at_{f.rate}'))}; aim {AIM_FRESHNESS_P99_S:g} s: "
                        f"{_met(t.get(f'{f.system}_freshness_aim_met_at_{f.rate}'))}"))
        else:
            out.append((f"the baseline at {f.achieved_rate:,.0f} events/s", "",
                        f"applied p50 {_fmt(f.p50_s, '.2f', ' s')}, p99 {_fmt(f.p99_s, '.2f', ' s')}; in a "
                        f"refreshed union p50 {_fmt(f.published_p50_s, '.2f', ' s')}, p99 "
                        f"{_fmt(f.published_p99_s, '.2f', ' s')} ({f.seen} of {f.samples} samples; caught up "
                        f"{_fmt(f.caught_up_s, '.1f', ' s')} after the last)", ""))


def _queries_rows(r: ActivityBenchResult, t: dict[str, Any], out: list[Row]) -> None:
    assert r.queries is not None
    q = r.queries
    for phase, queries in q.phases.items():
        when = f"{q.traffic_rate:,} events/s flowing in" if phase == "traffic" else "traffic stopped"
        for what in ("top", "channel"):
            f, b = queries.get(f"flow {what}"), queries.get(f"baseline {what}")
            if f is None or b is None:
                continue
            out.append((f"{'top 100 of a workspace' if what == 'top' else 'channel count and rank'} at "
                        f"{q.rate:,} req/s, {when}",
                        f"p50 {_fmt(f.p50_ms, '.2f', ' ms')}, p99 {_fmt(f.p99_ms, '.2f', ' ms')} "
                        f"({f.errors} errors)",
                        f"p50 {_fmt(b.p50_ms, '.2f', ' ms')}, p99 {_fmt(b.p99_ms, '.2f', ' ms')} "
                        f"({b.errors} errors)",
                        f"p99 < {TARGET_QUERY_P99_MS:g} ms: "
                        + _met(t.get(f"flow_{what}_{phase}_met"))))
        c = queries.get("control GET")
        if c is not None:
            busy = q.cpu_cores.get(phase, {}).get("machine (every process, others' too)")
            out.append((f"control: GET of one key at {q.rate:,} req/s, {when} (the machine's busy cores: "
                        f"{_fmt(busy, '.2f')})",
                        f"p50 {_fmt(c.p50_ms, '.2f', ' ms')}, p99 {_fmt(c.p99_ms, '.2f', ' ms')}", "", ""))


def _memory_rows(r: ActivityBenchResult, t: dict[str, Any], out: list[Row]) -> None:
    assert r.memory is not None
    mm = r.memory
    for run in mm.runs:
        what = {"exact": "exact", "summary": f"--global-summary {mm.summary}",
                "churn": f"exact, after {run.pairs_ever - run.active_pairs:,} other pairs came and went",
                "baseline": "", "baseline_churn": ""}[run.name]
        if run.name.startswith("baseline"):
            out.append((f"bytes per active pair, {run.active_pairs:,} active, {run.pairs_ever:,} ever", "",
                        f"Redis {_fmt(run.redis_bytes_per_pair, ',.0f')} (its window's keys "
                        f"{_fmt(run.redis_window_bytes_per_pair, ',.0f')})", ""))
            continue
        out.append((f"bytes per active pair, {run.active_pairs:,} active, {run.pairs_ever:,} ever, {what}"
                    + (" (durable)" if run.durable else ""),
                    f"RSS {_fmt(run.rss_bytes_per_pair, ',.0f')} "
                    f"(peak {_fmt(run.peak_rss_bytes_per_pair, ',.0f')}); "
                    f"Redis {_fmt(run.redis_bytes_per_pair, ',.0f')}"
                    + (f"; recovery dir {_fmt(run.recovery_dir_bytes_per_pair, ',.0f')}" if run.durable else "")
                    + f" ({run.seconds:.0f} s)", "", ""))
    for run in mm.runs:
        if run.stages:
            out.append((f"churn{' (durable)' if run.durable else ''}, one hour at a time: per active pair "
                        f"after each hour (pairs ever: RSS / Redis / recovery dir)",
                        "; ".join(f"{st['pairs_ever'] / 1e6:g}M: {st['rss_bytes_per_pair']:,.0f} / "
                                  f"{st['redis_bytes_per_pair']:,.0f} / {st['recovery_dir_bytes_per_pair']:,.0f}"
                                  for st in run.stages), "", ""))
    if "memory_flat_met" in t:
        out.append(("memory per active pair, last hour / second hour (after the window slid once)",
                    f"RSS x{t.get('memory_churn_rss_ratio')}, Redis x{t.get('memory_churn_redis_ratio')} "
                    f"(RSS vs the first hour x{t.get('memory_churn_rss_vs_first_hour')})", "",
                    "flat (<= 1.1): " + _met(t.get("memory_flat_met"))))


def _error_rows(r: ActivityBenchResult, t: dict[str, Any], out: list[Row]) -> None:
    assert r.error is not None
    for e in r.error.runs:
        out.append((f"--global-summary {e.n}: T {e.total:,}, T/N {e.bound:,.1f}",
                    f"count_high - count_low max {e.width_max:,} (mean {e.width_mean:,.1f}); true - count_low max "
                    f"{e.error_low_max:,} ({e.error_low_max_relative:.1%}); {e.exact_items} of {e.items} exact; "
                    f"exact top {e.k} listed {e.recall_top_k:.0%}", "",
                    f"within T/N: {_met(e.violations == 0)} ({e.violations} violations)"))


def _profile_rows(r: ActivityBenchResult, t: dict[str, Any], out: list[Row]) -> None:
    assert r.profile is not None
    for name, shares in r.profile.shares.items():
        out.append((f"profile, {name}: share of the flow's CPU samples",
                    "; ".join(f"{p} {s:.0%}" for p, s in shares.items()), "", ""))

ROWS = {"throughput": _throughput_rows, "freshness": _freshness_rows, "queries": _queries_rows, "memory": _memory_rows, "error": _error_rows, "profile": _profile_rows}


def rows(r: ActivityBenchResult) -> list[Row]:
    """(what, flow, baseline, target) rows of the summary table."""
    out: list[Row] = []
    for name, part_rows in ROWS.items():
        if getattr(r, name):
            part_rows(r, r.targets, out)
    return out


def print_table(r: ActivityBenchResult) -> None:
    rig.print_table(f"activity: the flow vs the seed's design ({r.machine.get('cpus')} CPUs)", rows(r), 170)


def _throughput_panel(th: Throughput, ax: Any) -> None:
    names = [s for s in SYSTEMS if s in th.median_events_per_s]
    labels = {"baseline": "seed\n(EXPIRE/msg)", "baseline_lean": "seed lean\n(EXPIRE/batch)", "flow": "flow",
              "flow_durable": "flow\ndurable"}
    vals = [th.median_events_per_s[s] for s in names]
    ax.bar([labels[s] for s in names], vals, color=("#b0b0b0", "#909090", "#2b7bba", "#1b4f7a")[:len(vals)])
    rig.label_bars(ax, vals, fontsize=8)
    ax.axhline(TARGET_RATIO * th.median_events_per_s["baseline_lean"], color="red", linestyle="--",
               linewidth=1, label=f"target {TARGET_RATIO:g}x lean")
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(f"events/s, {th.log_events:,}-message backlog\nflow/lean {th.ratio_lean:.2f}, durable "
                 f"{th.durable_ratio_lean:.2f}; mismatches {th.mismatches}", fontsize=10)


def _cpu_panel(th: Throughput, ax: Any) -> None:
    names = [s for s in SYSTEMS if s in th.median_cpu_s_per_1m]
    labels = {"baseline": "seed\n(EXPIRE/msg)", "baseline_lean": "seed lean\n(EXPIRE/batch)", "flow": "flow",
              "flow_durable": "flow\ndurable"}
    rig.cpu_bars(ax, [labels[s] for s in names], [th.median_cpu_s_per_1m[s] for s in names],
                 f"CPU per 1M messages (own + Redis + broker)\nflow/lean x{th.cpu_ratio_lean:.2f}, durable "
                 f"x{th.durable_cpu_ratio_lean:.2f} (target <= {TARGET_CPU_RATIO:g})")


def _freshness_panel(fr: Freshness, ax: Any) -> None:
    runs = fr.runs
    labels = [f"{f.system}\n{f.rate // 1000}k/s" for f in runs]
    x = range(len(runs))
    ax.bar([i - 0.2 for i in x], [f.p50_s or 0 for f in runs], 0.4, label="p50", color="#7fb3e0")
    ax.bar([i + 0.2 for i in x], [f.p99_s or 0 for f in runs], 0.4, label="p99", color="#2b7bba")
    for i, f in enumerate(runs):
        if f.published_p99_s is not None:
            ax.plot([i - 0.4, i + 0.4], [f.published_p99_s] * 2, color="black", linewidth=1)
    ax.axhline(TARGET_FRESHNESS_P99_S, color="red", linestyle="--", linewidth=1, label="p99 target")
    ax.set_xticks(list(x), labels, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("seconds")
    ax.legend(fontsize=8)
    ax.set_title("freshness: produced -> published\n(baseline: applied; black: in a refreshed union p99)",
                 fontsize=10)


def _queries_panel(q: Queries, ax: Any) -> None:
    names = [(p, n) for p, qs in q.phases.items() for n in qs]
    vals = [q.phases[p][n].p99_ms or 0 for p, n in names]
    ax.bar(range(len(names)), vals, color=["#2b7bba" if n.startswith("flow") else
                                           "#e0a030" if n.startswith("control") else "#b0b0b0"
                                           for _, n in names])
    ax.set_xticks(range(len(names)), [f"{n}\n{p}" for p, n in names], fontsize=6, rotation=45)
    ax.axhline(TARGET_QUERY_P99_MS, color="red", linestyle="--", linewidth=1, label="p99 target")
    ax.set_yscale("log")
    ax.set_ylabel("p99 ms")
    ax.legend(fontsize=8)
    ax.set_title(f"queries at {q.rate:,} req/s (p99)", fontsize=10)


def _memory_panel(mm: Memory, ax: Any) -> None:
    labels, vals, colors = [], [], []
    for run in mm.runs:
        tag = run.name + (" dur." if run.durable else "")
        if run.rss_bytes_per_pair is not None and not run.durable:
            labels.append(f"{tag}\nRSS")
            vals.append(run.rss_bytes_per_pair)
            colors.append("#2b7bba")
        if run.redis_bytes_per_pair is not None and not run.durable:
            labels.append(f"{tag}\nRedis")
            vals.append(run.redis_bytes_per_pair)
            colors.append("#b0b0b0" if run.name.startswith("baseline") else "#5fa8e0")
        if run.durable and run.recovery_dir_bytes_per_pair is not None:
            labels.append(f"{tag}\nrec. dir")
            vals.append(run.recovery_dir_bytes_per_pair)
            colors.append("#1b4f7a")
    ax.bar(range(len(vals)), vals, color=colors)
    rig.label_bars(ax, vals, fontsize=6)
    ax.set_xticks(range(len(vals)), labels, fontsize=6, rotation=45)
    ax.set_title(f"bytes per active pair ({mm.pairs:,} active)", fontsize=10)


def _error_panel(er: Error, ax: Any) -> None:
    e = er.runs
    x = range(len(e))
    ax.bar([i - 0.2 for i in x], [run.width_max for run in e], 0.4, label="max count_high - count_low",
           color="#2b7bba")
    ax.bar([i + 0.2 for i in x], [run.bound for run in e], 0.4, label="T / N", color="#b0b0b0")
    ax.set_xticks(list(x), [f"N = {run.n}" for run in e])
    ax.legend(fontsize=8)
    ax.set_title("global summary: bound width vs T/N", fontsize=10)

PANELS: dict[str, Any] = {"throughput": _throughput_panel, "freshness": _freshness_panel, "queries": _queries_panel, "memory": _memory_panel, "error": _error_panel}


def chart(r: ActivityBenchResult, path: Path) -> None:
    # each panel draws its part of the result, when measured
    panels = [functools.partial(draw, getattr(r, part)) for part, draw in PANELS.items() if getattr(r, part) is not None]
    if r.throughput is not None and r.throughput.median_cpu_s_per_1m:
        panels.insert(1, functools.partial(_cpu_panel, r.throughput))
    rig.chart(path, "rankflow activity vs the seed's design (ZINCRBY per message, ZUNIONSTORE of 60 buckets)", panels, (5.4, 4.6))


def write_outputs(result: ActivityBenchResult, out: Path) -> tuple[Path, Path]:
    """``activity.json`` and ``activity.png``, with the parts this run did not measure kept
    from the previous ``activity.json`` (each part says when, on which commit and with which
    configuration it was measured)."""
    result = rig.keep_previous(result, out / "activity.json", PARTS, targets)
    return rig.write_results(result, out, "activity", chart)
