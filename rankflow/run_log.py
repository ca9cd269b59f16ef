"""What a running flow says about itself: a position line every ``--log-every`` seconds,
a progress bar while it catches up on a terminal, and one line when it has caught up.

A live run is otherwise silent after "now publishes to namespace NS", and a catch-up of a long backlog
gave no sign of how far it got. All of it is read from a thread, from what the flow
already keeps for ``--metrics-port`` (``operators.metrics.METRICS``): the last published
snapshot's positions and time (the publisher sets them once per barrier) and each input
partition's lag (the sources set it once per batch), and whether the run caught up
(``operators.catch_up``, what the metrics port's ``GET /readyz`` answers). So nothing is
added per event, and a run that logs costs what one that does not costs.

The lag is the sources' own: records to read for Kafka (from the consumer's cached high
watermark), bytes not yet read for a JSON Lines file. A process knows the lag only of
the partitions it reads, so a run of several processes logs positions and rates without
lag (each process's ``rankflow_input_lag`` is on its metrics port). "Caught up" is the
readiness's: a stored snapshot holds, for every partition, the end its input had when the
run started; it is said once, by the process that publishes.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TaskProgressColumn, TextColumn, TimeRemainingColumn

from rankflow.cli_format import positions as show_positions
from rankflow.operators.metrics import METRICS
from rankflow.options import RunOptions

log = logging.getLogger("rankflow.run")

TICK_S = 0.5
"""How often the thread looks at the metrics: the bar's refresh, and how soon "caught up" is noticed."""
RATE_WINDOW_S = 5.0
"""The bar's events/s: over the snapshots of about this long (the position line's: since the last line)."""


@dataclass(frozen=True)
class Reading:
    """The last published snapshot as the metrics hold it, and the sources' lag then."""

    positions: Mapping[str, int]
    published_at: float  # time.time() of the publish
    snapshot_id: int | None
    lag: Mapping[str, int]  # partition -> records (Kafka) or bytes (JSON Lines) not yet read

    @property
    def read(self) -> int:
        return sum(self.positions.values())


def read_metrics(with_lag: bool) -> Reading | None:
    """The metrics' last snapshot (None before the first publish, or in a process that does not
    publish); copies of the dicts the flow's threads write (a dict copy is atomic under the GIL)."""
    last = METRICS.last
    if last is None:
        return None
    positions, gauges, at = last
    snapshot_id = next((int(g.value) for g in gauges if g.name == "snapshot_id"
                        and not isinstance(g.value, Mapping)), None)
    return Reading(dict(positions), at, snapshot_id, dict(METRICS.input_lag) if with_lag else {})


def lag_text(lag: int, unit: str) -> str:
    """``1,234 records`` or ``12.3 MB``.

    >>> lag_text(1234, "records"), lag_text(12_345_678, "bytes"), lag_text(512, "bytes")
    ('1,234 records', '12.3 MB', '512 bytes')
    """
    if unit == "bytes" and lag >= 1_000_000:
        return f"{lag / 1e6:,.1f} MB"
    return f"{lag:,} {unit}"


class RunLog:
    """The reporting thread of one execution (:meth:`start` before it, :meth:`stop` after).

    ``every_s``: the position line's interval (0: none); ``live``: the run follows its input,
    so a catch-up ends (else the whole execution is one, summed up by its command);
    ``progress``: draw a bar on standard error (a terminal) until caught up or stopped."""

    def __init__(self, every_s: float, unit: str, with_lag: bool, live: bool, progress: bool,
                 what: str = "catching up") -> None:
        self._every_s = every_s
        self._unit = unit
        self._with_lag = with_lag
        self._live = live
        self._what = what
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rankflow-run-log", daemon=True)
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        if progress:
            self._bar = Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                                 TextColumn("{task.fields[rate]}"), TextColumn("{task.fields[lag]}"),
                                 TimeRemainingColumn(), console=Console(stderr=True), transient=True)
            self._task = self._bar.add_task(what, total=None, rate="", lag="")

    @classmethod
    def of(cls, opts: RunOptions, live: bool, what: str = "catching up") -> RunLog:
        """The reporting of a run or rebuild of ``opts``: the lag only in a process that reads every
        partition; a bar only on a terminal, with text logs."""
        alone = opts.addresses is None and opts.processes == 1
        progress = alone and opts.log_format == "text" and sys.stderr.isatty()
        return cls(opts.log_every_s, "records" if opts.input.startswith("kafka:") else "bytes", alone, live,
                   progress, what)

    def start(self) -> RunLog:
        """Start the thread, unless it would have nothing to say (``--log-every 0`` on a run to
        the end of its input, without a terminal)."""
        if self._bar is not None:
            self._bar.start()
        if self._every_s or self._live or self._bar is not None:
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self._end_bar()

    def _end_bar(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def _loop(self) -> None:
        started, since = time.monotonic(), time.time()
        first: Reading | None = None
        recent: deque[Reading] = deque()  # the bar's rate: over the last RATE_WINDOW_S
        last_line: Reading | None = None
        last_line_at = started
        caught_up = not self._live
        while not self._stop.wait(TICK_S):
            now = read_metrics(self._with_lag)
            if now is None or now.published_at < since:  # none yet (an earlier execution's in this process)
                continue
            first = first or now
            if self._bar is not None:
                recent.append(now)
                while now.published_at - recent[0].published_at > RATE_WINDOW_S:
                    recent.popleft()
                self._draw(now, recent[0])
            if not caught_up and METRICS.catch_up.verdict()[0]:  # what GET /readyz answers
                caught_up = True
                self._end_bar()
                self._caught_up(now, time.monotonic() - started)
            due = self._every_s and time.monotonic() - last_line_at >= self._every_s
            if due and self._bar is None:
                self._line(now, last_line or first)
                last_line, last_line_at = now, time.monotonic()

    def _rate(self, now: Reading, before: Reading) -> float:
        took = now.published_at - before.published_at
        return max(0, now.read - before.read) / took if took > 0 else 0.0

    def _line(self, now: Reading, before: Reading) -> None:
        """The position line; its rate is since the previous line's snapshot (none yet on the first
        line when it has seen only one snapshot)."""
        lag = sum(now.lag.values()) if now.lag else None
        fields: dict[str, object] = {"position": now.read, "positions": dict(now.positions),
                                     "snapshot_id": now.snapshot_id,
                                     "snapshot_age_s": round(max(0.0, time.time() - now.published_at), 3)}
        parts = ""
        if lag is not None:
            fields.update(lag=lag, lag_unit=self._unit)
            parts = f", lag {lag_text(lag, self._unit)}"
        if now.published_at > before.published_at:
            rate = self._rate(now, before)
            fields["events_per_second"] = round(rate, 1)
            parts += f", {rate:,.0f} events/s"
        log.info("input through %s (%s)%s", f"{now.read:,}", show_positions(now.positions), parts, extra=fields)

    def _caught_up(self, now: Reading, took: float) -> None:
        log.info("caught up in %.1fs: input through %s (%s)", took, f"{now.read:,}", show_positions(now.positions),
                 extra={"event": "caught_up", "position": now.read, "positions": dict(now.positions),
                        "seconds": round(took, 3)})

    def _draw(self, now: Reading, before: Reading) -> None:
        assert self._bar is not None and self._task is not None
        lag = sum(now.lag.values()) if now.lag else None
        if lag is None:
            completed, total = now.read, None
        elif self._unit == "bytes":  # the files' sizes: the lag is in bytes, the positions in lines
            total = sum(_size(path) for path in now.lag)
            completed = max(0, total - lag)
        else:
            completed, total = now.read, now.read + lag
        self._bar.update(self._task, completed=completed, total=total,
                         rate=f"{self._rate(now, before):,.0f} events/s",
                         lag="" if lag is None else f"lag {lag_text(lag, self._unit)}")


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
