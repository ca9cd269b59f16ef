"""Whether a run has caught up with its input: the readiness of its metrics port (``GET /readyz``).

An orchestrator asks a run one thing: has it caught up, so that what readers see is
current? The answer is made of what the flow already knows, without asking Kafka, the
file system or Redis anything more:

* **The end seen at start**, per source partition: where its input ended when the run
  first looked. Kafka: the high watermark the partition's first fetch with messages
  carried, or the end-of-partition marker when it had nothing to read (the fetch answer,
  never a queried watermark, which some brokers answer wrongly: ``connectors.kafka``).
  JSON Lines: the line the reader was at when it passed the file's size at start, or
  first reached the file's end. A source reports it once (:meth:`CatchUp.end_seen`).
* **The positions a stored snapshot holds** (:meth:`CatchUp.stored`, from the publisher).

The run is caught up when a snapshot it stored holds, for every partition, a position at
or past that end: what readers get then includes everything the input held when the run
started. That is decided once: a run that fell behind later stays ready (its lag is on
``/metrics``), as a service that answered once is not taken out of rotation for being
busy. A live input written faster than the run reads is still caught up once the run got
to where the input ended at its start; a run that never gets there (a stalled Redis, a
backlog too large) answers ``503`` with how far its last snapshot is behind.

One process (``whole_input``) reads every partition and publishes, so it knows all of it.
A process of a run over several (``--processes``, ``--addresses``) knows only the
partitions it reads and, if the publisher runs there, the snapshots: it is ready once its
own partitions were read to the end they saw at start, and where the publisher runs, once
a stored snapshot holds them too. A process that reads no partition says so and is never
ready: give the input at least as many partitions as processes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any


class CatchUp:
    """What this process knows of its run's catching up; sources and the publisher report,
    the metrics server asks :meth:`verdict`. Calls are a few dictionary writes each: sources
    report their position only until they reached the end they saw."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset(whole_input=True)

    def reset(self, whole_input: bool) -> None:
        """A new execution (``execution.execute``): nothing known yet."""
        with self._lock:
            self.whole_input = whole_input
            self.listed: tuple[str, ...] | None = None  # every partition of the input (the source's list)
            self.built: set[str] = set()  # the partitions this process reads
            self.ends: dict[str, int] = {}  # partition -> the end it saw at start
            self.read: dict[str, int] = {}  # partition -> how far it was read (until it reached its end)
            self.positions: dict[str, int] | None = None  # of the last snapshot this process stored
            self.caught_up_at: float | None = None

    def listed_parts(self, parts: Iterable[str]) -> None:
        self.listed = tuple(parts)

    def built_part(self, part: str) -> None:
        with self._lock:
            self.built.add(part)

    def end_seen(self, part: str, end: int) -> None:
        """The end ``part``'s input had when the run first looked (once per partition)."""
        with self._lock:
            self.ends.setdefault(part, end)

    def read_to(self, part: str, position: int) -> bool:
        """``part`` was read up to ``position``; True once that is at or past the end it saw at
        start (its source then stops reporting)."""
        self.read[part] = position
        end = self.ends.get(part)
        return end is not None and position >= end

    def stored(self, positions: dict[str, int]) -> None:
        """A snapshot holding ``positions`` is in Redis."""
        self.positions = positions
        if self.caught_up_at is None and self._problem() is None:
            self.caught_up_at = time.time()

    def verdict(self) -> tuple[bool, dict[str, Any]]:
        """Ready or not, and the body of ``GET /readyz`` saying why."""
        if self.caught_up_at is None:
            problem = self._problem()
            if problem is not None:
                return False, {"status": "not ready", **problem}
            self.caught_up_at = time.time()
        return True, {"status": "ready", "caught_up_at_ms": int(self.caught_up_at * 1000)}

    def _problem(self) -> dict[str, Any] | None:
        with self._lock:
            parts = self.listed if self.whole_input else tuple(sorted(self.built))
            if parts is None:
                return {"reason": "the run has not started reading its input"}
            if not parts:
                return {"reason": "this process reads no partition of the input"}
            unknown = [p for p in parts if p not in self.ends]
            if unknown:
                return {"reason": f"catching up: not yet read to the end the input had at start: {_names(unknown)}"}
            ends = {p: self.ends[p] for p in parts}
            read = {p: self.read.get(p, 0) for p in parts}
            positions = self.positions
        if not self.whole_input and any(read[p] < ends[p] for p in parts):
            return _behind("this process has not read its partitions up to the end they had at start", read, ends)
        if positions is None:
            if not self.whole_input:
                return None  # the publisher runs in another process: this one has done its part
            return _behind("no snapshot stored yet", read, ends, "read")
        held = {p: positions.get(p, 0) for p in parts}
        if any(held[p] < ends[p] for p in parts):
            return _behind("catching up: the last stored snapshot is behind the end the input had at start", held, ends)
        return None


def _behind(reason: str, at: dict[str, int], ends: dict[str, int], what: str = "position") -> dict[str, Any]:
    lag = {p: max(0, ends[p] - at[p]) for p in ends}
    return {"reason": f"{reason} ({sum(lag.values())} records behind)", "lag": sum(lag.values()),
            "partitions": [{"partition": p, what: at[p], "end": ends[p], "lag": lag[p]} for p in sorted(ends)]}


def _names(parts: list[str]) -> str:
    shown = ", ".join(parts[:5])
    return shown if len(parts) <= 5 else f"{shown} and {len(parts) - 5} more"
