"""``rankflow bench-sweep``: throughput over topic shapes, rankflow vs the lean baseline.

Real topics have many partitions and many users; a benchmark on one shape can
flatter. For each number of users a log is generated (same events count, chaos and
song catalogue), produced to one topic per partition count, and every system runs
each topic to its end side by side (:class:`rankflow.bench.rig.Rig`): rankflow,
rankflow durable (``--recovery-dir``) and the lean baseline. Every cell checks the
rankings are equal. Writes ``sweep.json`` and ``sweep.png``.
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rankflow.bench.rig import BacklogRun, Rig

TARGET_RATIO = 2.0
SWEEP_SYSTEMS = ("rankflow", "rankflow_durable", "baseline_lean")


@dataclass
class SweepConfig:
    events: int = 1_000_000
    users: tuple[int, ...] = (100_000, 1_000_000)
    partitions: tuple[int, ...] = (4, 8, 16, 32)
    songs: int = 20_000
    seed: int = 1
    out: str = "bench-results"


@dataclass
class Cell:
    users: int
    partitions: int
    runs: dict[str, dict[str, Any]]
    ratio: float  # rankflow / lean baseline
    durable_ratio: float
    exact: bool


@dataclass
class SweepResult:
    config: dict[str, Any]
    machine: dict[str, Any]
    cells: list[Cell] = field(default_factory=list)
    targets: dict[str, Any] = field(default_factory=dict)


def cell(rig: Rig, cfg: SweepConfig, users: int, partitions: int) -> Cell:
    topic = f"sweep-u{users}-p{partitions}"
    rig.produce(rig.log_file(cfg.events, users, cfg.songs), topic, partitions)
    runs: dict[str, BacklogRun] = {system: rig.backlog(system, topic, cfg.events) for system in SWEEP_SYSTEMS}
    lean = runs["baseline_lean"].events_per_s
    result = Cell(users, partitions, {s: {k: v for k, v in asdict(r).items() if k != "top"} for s, r in runs.items()},
                  runs["rankflow"].events_per_s / lean, runs["rankflow_durable"].events_per_s / lean,
                  all(r.top == runs["rankflow"].top for r in runs.values()))
    rig.log(f"{users:,} users, {partitions} partitions: ratio {result.ratio:.2f}, durable "
            f"{result.durable_ratio:.2f}, exact {result.exact}")
    return result


def run(cfg: SweepConfig) -> SweepResult:
    result = SweepResult(config=asdict(cfg), machine={
        "cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()})
    with Rig(cfg.seed) as rig:
        for users in cfg.users:
            for partitions in cfg.partitions:
                result.cells.append(cell(rig, cfg, users, partitions))
    result.targets = {
        "ratio_min": TARGET_RATIO,
        "every_cell_met": all(c.ratio >= TARGET_RATIO for c in result.cells),
        "every_durable_cell_met": all(c.durable_ratio >= TARGET_RATIO for c in result.cells),
        "exact": all(c.exact for c in result.cells),
    }
    return result


def chart(result: SweepResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    users = sorted({c.users for c in result.cells})
    fig, axes = plt.subplots(1, len(users), figsize=(6.5 * len(users), 4.4), squeeze=False)
    colors = {"rankflow": "#2b7bba", "rankflow_durable": "#1b4f7a", "baseline_lean": "#909090"}
    for ax, n in zip(axes[0], users):
        cells = sorted((c for c in result.cells if c.users == n), key=lambda c: c.partitions)
        xs = range(len(cells))
        width = 0.27
        for j, system in enumerate(SWEEP_SYSTEMS):
            ax.bar([x + (j - 1) * width for x in xs], [c.runs[system]["events_per_s"] for c in cells], width,
                   label=system.replace("_", " "), color=colors[system])
        for x, c in zip(xs, cells):
            top = max(r["events_per_s"] for r in c.runs.values())
            ax.text(x, top * 1.02, f"x{c.ratio:.2f}\ndur. x{c.durable_ratio:.2f}", ha="center", va="bottom",
                    fontsize=8)
        ax.set_xticks(list(xs), [f"{c.partitions} partitions" for c in cells])
        ax.set_ylabel("events/s")
        ax.set_ylim(0, max(r["events_per_s"] for c in cells for r in c.runs.values()) * 1.25)
        ax.set_title(f"{n:,} users, {result.config['events']:,} events (target x{TARGET_RATIO} vs lean)")
        ax.legend(loc="lower left", fontsize=8)
    fig.suptitle(f"rankflow vs the lean baseline across topic shapes — {result.machine['cpus']} CPUs")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(cfg: SweepConfig) -> SweepResult:
    result = run(cfg)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.json").write_text(json.dumps(asdict(result), indent=2) + "\n")
    chart(result, out / "sweep.png")
    print(f"{'users':>10} {'parts':>5} {'rankflow':>10} {'durable':>10} {'lean':>10} {'ratio':>6} {'dur.':>6} exact")
    for c in result.cells:
        r = c.runs
        print(f"{c.users:>10,} {c.partitions:>5} {r['rankflow']['events_per_s']:>10,.0f} "
              f"{r['rankflow_durable']['events_per_s']:>10,.0f} {r['baseline_lean']['events_per_s']:>10,.0f} "
              f"{c.ratio:>6.2f} {c.durable_ratio:>6.2f} {c.exact}")
    print(f"wrote {out / 'sweep.json'} and {out / 'sweep.png'}")
    return result
