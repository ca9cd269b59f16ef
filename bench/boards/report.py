"""``rankflow bench-boards``: its table, its chart and its result files."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from rankflow.bench import rig
from rankflow.bench.boards.results import (PARTS, TARGET_BIG_LOAD_S, TARGET_CPU_RATIO, TARGET_FRESHNESS_P99_S,
                                           TARGET_PLAYER_P99_MS, TARGET_RATIO, TARGET_TOP_P99_MS, BoardsBenchResult,
                                           targets)
from rankflow.bench.rig import fmt as _fmt


def rows(r: BoardsBenchResult) -> list[tuple[str, str, str, str]]:
    """(what, flow, baseline, target) rows of the summary table."""
    out: list[tuple[str, str, str, str]] = []
    t = r.targets
    if r.throughput:
        th, m = r.throughput, r.throughput.median_results_per_s
        runs = lambda s: " / ".join(f"{x.results_per_s:,.0f}" for x in th.runs if x.system == s)  # noqa: E731
        out.append(("results/s on the backlog (median; each run)",
                    f"{m['flow']:,.0f} ({runs('flow')}); durable {m['flow_durable']:,.0f} ({runs('flow_durable')})",
                    f"{m['baseline']:,.0f} ({runs('baseline')})",
                    f"flow/baseline {th.ratio:.2f}, durable {th.durable_ratio:.2f} (>= {TARGET_RATIO}): "
                    f"{'met' if t.get('durable_ratio_met') else 'MISSED'}"))
        if th.median_cpu_s_per_1m:
            c = th.median_cpu_s_per_1m
            cpu = lambda s: (f"{c[s]['own']:.1f} + {c[s]['redis']:.1f} + {c[s]['broker']:.1f} "  # noqa: E731
                             f"= {c[s]['total']:.1f}")
            out.append(("CPU-s per 1M results, own + Redis + broker (median)",
                        f"{cpu('flow')}; durable {cpu('flow_durable')}", cpu("baseline"),
                        f"flow/baseline x{th.cpu_ratio:.2f}, durable x{th.durable_cpu_ratio:.2f} "
                        f"(<= {TARGET_CPU_RATIO}): {'met' if t.get('durable_cpu_ratio_met') else 'MISSED'}"))
        out.append(("exactness: scores per player per board vs the baseline",
                    f"{th.mismatches} mismatches over {len(th.runs)} runs ({th.boards_compared} boards, "
                    f"{th.entries_compared:,} entries each); {th.dead_letters} dead letters", "reference",
                    "0: " + ("met" if t.get("exact") else "MISSED")))
    if r.freshness:
        f = r.freshness
        out.append((f"freshness at {f.achieved_rate:,.0f} results/s (produced -> visible in Redis)",
                    f"p50 {_fmt(f.p50_s, '.3f', ' s')}, p99 {_fmt(f.p99_s, '.3f', ' s')} ({f.seen} samples)", "",
                    f"p99 < {TARGET_FRESHNESS_P99_S:g} s: {'met' if t.get('freshness_met') else 'MISSED'}"))
    if r.memory:
        mm = r.memory
        out.append((f"bytes per board entry, {mm.players:,} players x 4 boards ({mm.entries:,} entries)",
                    f"Redis {_fmt(mm.redis_bytes_per_entry, ',.0f')}; "
                    f"flow RSS {_fmt(mm.flow_rss_bytes_per_entry, ',.0f')}"
                    f" (durable {_fmt(mm.flow_durable_rss_bytes_per_entry, ',.0f')}); recovery dir "
                    f"{_fmt(mm.recovery_dir_bytes_per_entry, ',.0f')} on disk",
                    f"Redis {_fmt(mm.baseline_redis_bytes_per_entry, ',.0f')}", ""))
    if r.reads:
        rd = r.reads
        for name, lat, target, key in (("top n=100", rd.top, TARGET_TOP_P99_MS, "top_met"),
                                       ("player rank", rd.player, TARGET_PLAYER_P99_MS, "player_met")):
            out.append((f"{name} at {rd.rate:,} req/s, {rd.board_players:,}-player board, flow publishing "
                        f"{rd.traffic_rate:,} results/s",
                        f"p50 {_fmt(lat.p50_ms, '.2f', ' ms')}, p99 {_fmt(lat.p99_ms, '.2f', ' ms')} "
                        f"({lat.achieved_rps:,.0f} req/s, {lat.errors} errors)",
                        "", f"p99 < {target:g} ms: {'met' if t.get(key) else 'MISSED'}"))
        for index, http in (("redis", rd.http), ("memory", rd.http_memory)):
            for phase, queries in http.items():
                for query, lat in queries.items():
                    name = "GET /boards/G/all/top?n=100" if query == "top" else "GET /boards/G/all/players/{id}"
                    when = (f"flow publishing {rd.traffic_rate:,} results/s" if phase == "traffic"
                            else "traffic stopped")
                    target = TARGET_TOP_P99_MS if query == "top" else TARGET_PLAYER_P99_MS
                    p99 = lat.get("p99_ms")
                    met = p99 is not None and p99 < target and not lat.get("errors")
                    out.append((f"{name} (rankflow serve --board-index {index}) at {rd.rate:,} req/s, {when}",
                                f"p50 {_fmt(lat.get('p50_ms'), '.2f', ' ms')}, p99 {_fmt(p99, '.2f', ' ms')} "
                                f"({lat.get('errors', 0)} errors)", "",
                                f"p99 < {target:g} ms: {'met' if met else 'MISSED'}" if phase == "traffic" else ""))
        if rd.memory_entries:
            out.append((f"rankflow serve --board-index memory: {rd.memory_entries:,} entries in memory",
                        f"{_fmt(rd.memory_bytes_per_entry, ',.0f')} bytes per entry (RSS over --board-index redis's:"
                        f" {rd.serve_rss_bytes.get('memory', 0) / 2**20:,.0f} vs "
                        f"{rd.serve_rss_bytes.get('redis', 0) / 2**20:,.0f} MiB); loaded in "
                        f"{_fmt(rd.memory_load_s, '.1f', ' s')}, {rd.memory_loads} load(s) in all", "", ""))
        for name, lat in (("top n=100", rd.idle_top), ("player rank", rd.idle_player)):
            if lat.requests:
                out.append((f"{name} at {rd.rate:,} req/s, the same board, traffic stopped (the flow idle)",
                            f"p50 {_fmt(lat.p50_ms, '.2f', ' ms')}, p99 {_fmt(lat.p99_ms, '.2f', ' ms')}", "", ""))
    for b in (r.big, r.big_redis):
        if b is None:
            continue
        what = "the flow on one result per player (4 boards each)" if b.mode == "flow" else \
            "the boards publisher alone, one board"
        out.append((f"{b.players:,} players on one board: {what}",
                    f"{b.loaded_players:,} players loaded in {_fmt(b.load_s, ',.0f', ' s')} "
                    f"({_fmt(b.results_per_s, ',.0f', '/s')}); Redis {b.redis_used_memory_bytes / 2**30:.2f} GiB "
                    f"({b.entries:,} entries, {_fmt(b.redis_bytes_per_entry, ',.0f')} B each); "
                    f"{'flow' if b.mode == 'flow' else 'publisher'} RSS {b.process_peak_rss_bytes / 2**30:.2f} GiB"
                    f" ({b.process_peak_rss_bytes / max(b.loaded_players, 1):,.0f} B per player); CPU s: "
                    f"flow {_fmt(b.flow_cpu_s, ',.0f')}, Redis {_fmt(b.redis_cpu_s, ',.0f')}, "
                    f"broker {_fmt(b.broker_cpu_s, ',.0f')}"
                    + (f"; {b.stopped_because}" if b.stopped_because else ""),
                    "", "fits: " + ("yes" if b.complete else "NO")
                    + (f"; load < {TARGET_BIG_LOAD_S:.0f} s: " + ("met" if t.get("big_load_met") else "MISSED")
                       if b.mode == "flow" else "")))
        if b.reads_checked:
            out.append((f"reads of that board ({b.reads_checked:,} answers vs the log's exact ranks, one client)",
                        f"{b.reads_wrong} wrong; " + ", ".join(f"{kind} p50 {t['p50_ms']:.2f} ms, p99 {t['p99_ms']:.2f} ms"
                                                            for kind, t in b.read_ms.items()),
                        "", "exact: " + ("yes" if b.reads_wrong == 0 else "NO")))
    return out



def print_table(r: BoardsBenchResult) -> None:
    rig.print_table(f"score boards: flow vs the seed's design ({r.machine['cpus']} CPUs)", rows(r), 160)


def _throughput(r: BoardsBenchResult, ax: Any) -> None:
    th = r.throughput
    assert th is not None
    vals = [th.median_results_per_s[s] for s in ("baseline", "flow", "flow_durable")]
    ax.bar(["baseline\n(Lua/result)", "flow", "flow\ndurable"], vals, color=("#b0b0b0", "#2b7bba", "#1b4f7a"))
    rig.label_bars(ax, vals)
    ax.axhline(TARGET_RATIO * th.median_results_per_s["baseline"], color="red", linestyle="--", linewidth=1,
               label=f"target {TARGET_RATIO:g}x baseline")
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(f"results/s, {r.config['results']:,}-result backlog\nflow/baseline {th.ratio:.2f}, "
                 f"durable {th.durable_ratio:.2f}; mismatches {th.mismatches}", fontsize=10)


def _cpu(r: BoardsBenchResult, ax: Any) -> None:
    th = r.throughput
    assert th is not None
    rig.cpu_bars(ax, ["baseline\n(Lua/result)", "flow", "flow\ndurable"],
                 [th.median_cpu_s_per_1m.get(s, {}) for s in ("baseline", "flow", "flow_durable")],
                 f"CPU per 1M results (own + Redis + broker)\nflow x{th.cpu_ratio:.2f}, durable "
                 f"x{th.durable_cpu_ratio:.2f} (target <= {TARGET_CPU_RATIO})")


def _freshness(r: BoardsBenchResult, ax: Any) -> None:
    f = r.freshness
    assert f is not None
    ax.bar(["p50", "p99"], [f.p50_s or 0, f.p99_s or 0], color=("#7fb3e0", "#2b7bba"))
    ax.axhline(TARGET_FRESHNESS_P99_S, color="red", linestyle="--", linewidth=1, label="p99 target")
    ax.legend(fontsize=8)
    ax.set_ylabel("seconds")
    ax.set_title(f"freshness at {f.achieved_rate:,.0f} results/s\n(produced -> visible)", fontsize=10)


def _memory(r: BoardsBenchResult, ax: Any) -> None:
    mm = r.memory
    assert mm is not None
    labels = ["Redis\n(flow)", "Redis\n(baseline)", "flow\nRSS", "durable\nRSS", "recovery\ndir"]
    vals = [v or 0 for v in (mm.redis_bytes_per_entry, mm.baseline_redis_bytes_per_entry, mm.flow_rss_bytes_per_entry,
                             mm.flow_durable_rss_bytes_per_entry, mm.recovery_dir_bytes_per_entry)]
    ax.bar(labels, vals, color=("#2b7bba", "#b0b0b0", "#5fa8e0", "#1b4f7a", "#909090"))
    rig.label_bars(ax, vals, fontsize=8)
    ax.set_title(f"bytes per board entry\n({mm.players:,} players x 4 boards)", fontsize=10)


def _reads(r: BoardsBenchResult, ax: Any) -> None:
    rd = r.reads
    assert rd is not None
    x = [0, 1]
    ax.bar([i - 0.2 for i in x], [rd.top.p50_ms or 0, rd.player.p50_ms or 0], 0.4, label="p50", color="#7fb3e0")
    ax.bar([i + 0.2 for i in x], [rd.top.p99_ms or 0, rd.player.p99_ms or 0], 0.4, label="p99", color="#2b7bba")
    ax.plot([-0.4, 0.4], [TARGET_TOP_P99_MS] * 2, color="red", linestyle="--", linewidth=1, label="p99 target")
    ax.plot([0.6, 1.4], [TARGET_PLAYER_P99_MS] * 2, color="red", linestyle="--", linewidth=1)
    ax.set_xticks(x, ["top n=100", "player rank"])
    ax.set_ylabel("ms")
    ax.legend(fontsize=8)
    ax.set_title(f"reads from Redis (BoardReader) at {rd.rate:,} req/s\n"
                 f"while the flow publishes {rd.traffic_rate:,} results/s", fontsize=10)


def _big(part: str) -> Any:
    def draw(r: BoardsBenchResult, ax: Any) -> None:
        b = getattr(r, part)
        vals = [b.redis_used_memory_bytes / 2**30, b.process_peak_rss_bytes / 2**30]
        ax.bar(["Redis", "flow RSS" if b.mode == "flow" else "publisher"], vals, color=("#2b7bba", "#5fa8e0"))
        rig.label_bars(ax, vals, ".2f", " GiB")
        ax.set_title(f"{b.loaded_players:,} of {b.players:,} players ({b.mode})\n"
                     f"load {_fmt(b.load_s, '.0f', ' s')}", fontsize=10)
    return draw


PANELS = {"throughput": _throughput, "cpu": _cpu, "freshness": _freshness, "memory": _memory, "reads": _reads, "big": _big("big"),
          "big_redis": _big("big_redis")}


def chart(r: BoardsBenchResult, path: Path) -> None:
    shown = lambda part: (bool(r.throughput and r.throughput.median_cpu_s_per_1m) if part == "cpu"  # noqa: E731
                          else getattr(r, part) is not None)
    panels = [functools.partial(draw, r) for part, draw in PANELS.items() if shown(part)]
    rig.chart(path, "rankflow score boards vs the seed's design (one Lua script per result)", panels, (5.2, 4.6))


def write_outputs(result: BoardsBenchResult, out: Path) -> tuple[Path, Path]:
    """``boards.json`` and ``boards.png``, with the parts this run did not measure kept from
    the previous ``boards.json``."""
    result = rig.keep_previous(result, out / "boards.json", (*PARTS, "big_redis"), targets)
    return rig.write_results(result, out, "boards", chart)
