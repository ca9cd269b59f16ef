"""Progress bars of the commands that write or load a log (``generate``, ``produce``).

Drawn only on a terminal (standard error is one) with text logs: a pipe, a file or a log
collector gets the command's one summary line instead, never a bar's escape codes. The
bars go to standard error, as every other line of the commands, and are removed when done
(the summary line follows). The callers update them once per batch of lines, never per line.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TextColumn,
                           TimeRemainingColumn, TransferSpeedColumn)
from rich.text import Text

from rankflow import log_setup


def on_terminal() -> bool:
    """Whether a bar may be drawn: standard error is a terminal and logs are text."""
    return sys.stderr.isatty() and not log_setup.is_json()


class RateColumn(ProgressColumn):
    """``12,345 events/s``: the task's speed in its own unit (rich's speed column is of bytes)."""

    def __init__(self, unit: str) -> None:
        super().__init__()
        self._unit = unit

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("" if speed is None else f"{speed:,.0f} {self._unit}/s")


def _bar(*columns: ProgressColumn) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), *columns, TimeRemainingColumn(),
                    console=Console(stderr=True), transient=True)


@contextmanager
def counting(what: str, total: int, unit: str = "events", enabled: bool = True) -> Iterator[Callable[[int], None] | None]:
    """A bar of ``total`` things (``unit``) while the block runs, on a terminal: yields the
    function to call with how many are done so far, or None where nothing is drawn."""
    if not (enabled and on_terminal()):
        yield None
        return
    with _bar(MofNCompleteColumn(), RateColumn(unit)) as bar:
        task = bar.add_task(what, total=total)
        yield lambda done: bar.update(task, completed=done)


@contextmanager
def reading(what: str, total_bytes: int, unit: str = "messages",
            enabled: bool = True) -> Iterator[Callable[[int, int, float], None] | None]:
    """A bar of a file read through (``total_bytes``), showing ``unit`` per second, on a terminal:
    yields the function to call with the bytes read, the things done and the seconds so far."""
    if not (enabled and on_terminal()):
        yield None
        return
    with _bar(TransferSpeedColumn(), TextColumn("{task.fields[done]}")) as bar:
        task = bar.add_task(what, total=total_bytes, done="")

        def update(read: int, done: int, seconds: float) -> None:
            bar.update(task, completed=read, done=f"{done:,} {unit}, {done / max(seconds, 1e-9):,.0f} {unit}/s")

        yield update
