"""Where a resumed run's snapshots start from: the input its recovery state has published.

A resumed execution replays from Bytewax's resume epoch. The snapshots its merger
emitted before that epoch are not emitted again: their changes went to the publisher,
and only Redis may hold them. So Redis must hold at least the positions of the last
of them (the merger's stored ``positions``), or those changes are lost for good (the
flow died while Redis stalled, the run stopped after losing Redis, or Redis was
restored from an older backup). :func:`published_floor` reads those positions from
the store, before the run starts: the publisher refuses to lay changes on a Redis
behind them (``Published.GAP``), and a product that cannot heal Redis in place (the
boards) sends its whole state again from the start (``Product.must_republish``).

The store is Bytewax 0.21.1's (pinned): SQLite partitions ``part-*.sqlite3`` with the
tables ``exs`` (executions), ``fronts`` (each worker's frontier per execution) and
``snaps`` (pickled state per step, key and epoch). The resume epoch is computed as
Bytewax computes it (``src/recovery.rs``, ``resume_from``): per worker of the last
execution the larger of its frontier and the execution's own resume epoch, then the
least of them; the state a step resumes with is its newest snapshot before that epoch.
"""

from __future__ import annotations

import pickle
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

from rankflow.operators.engine_types import MERGER_KEY


def merger_step(flow: str) -> str:
    """The merger's step id in a flow's recovery store (``operators.ranking_stage``)."""
    return f"{flow}.merger"


def published_floor(recovery_dir: str | Path, flow: str) -> dict[str, int] | None:
    """The positions of the last snapshot the stored run emitted before its resume epoch,
    or None when it emitted none (a store with no barrier yet: everything is replayed).

    Reads only (SQLite read-only): called before the run starts, while no process writes.
    """
    parts = sorted(Path(recovery_dir).glob("part-*.sqlite3"))
    if not parts:
        return None
    resume = _resume_epoch(parts)
    if resume is None:
        return None
    state = _newest_state(parts, merger_step(flow), MERGER_KEY, resume)
    positions = getattr(state, "positions", None)
    return dict(positions) if positions else None


def has_executions(recovery_dir: str | Path) -> bool:
    """Whether any execution was recorded in the store (Bytewax records one when its workers
    start, so only after every process of a run connected)."""
    for conn in _connections(sorted(Path(recovery_dir).glob("part-*.sqlite3"))):
        try:
            if conn.execute("SELECT 1 FROM exs LIMIT 1").fetchone() is not None:
                return True
        except sqlite3.OperationalError:  # a partition not initialised (the store being made)
            continue
    return False


def _connections(parts: list[Path]) -> Iterator[sqlite3.Connection]:
    for part in parts:
        with closing(sqlite3.connect(f"{part.resolve().as_uri()}?mode=ro", uri=True, timeout=30)) as conn:
            yield conn


def _resume_epoch(parts: list[Path]) -> int | None:
    """Bytewax's resume epoch over all partitions (``exs`` and ``fronts`` are sharded)."""
    executions: dict[int, tuple[int, int]] = {}
    fronts: dict[tuple[int, int], int] = {}
    for conn in _connections(parts):
        for ex, workers, resume in conn.execute("SELECT ex_num, worker_count, resume_epoch FROM exs"):
            executions[ex] = (workers, resume)
        for ex, worker, frontier in conn.execute("SELECT ex_num, worker_index, worker_frontier FROM fronts"):
            fronts[(ex, worker)] = max(frontier, fronts.get((ex, worker), frontier))
    if not executions:
        return None
    last = max(executions)
    workers, resume = executions[last]
    return min(max(resume, fronts.get((last, w), resume)) for w in range(workers))


def _newest_state(parts: list[Path], step: str, key: str, before: int) -> Any:
    """The newest stored state of ``step``'s ``key`` in an epoch before ``before`` (None if none)."""
    newest: tuple[int, bytes | None] | None = None
    for conn in _connections(parts):
        row = conn.execute("SELECT snap_epoch, ser_change FROM snaps WHERE step_id = ? AND state_key = ? "
                           "AND snap_epoch < ? ORDER BY snap_epoch DESC LIMIT 1", (step, key, before)).fetchone()
        if row is not None and (newest is None or row[0] > newest[0]):
            newest = row
    if newest is None or newest[1] is None:
        return None
    return pickle.loads(newest[1])  # noqa: S301 - the run's own store, written by this program
