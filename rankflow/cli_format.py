"""How every reader command prints an answer for people (``rankflow top``, ``boards``, ``activity``).

One format, written down in docs/cli.md: a bold title line, a table whose first column is the
rank, numbers right-aligned and identifiers left-aligned, then footer lines, the last one naming
the snapshot. Quantities (ranks, counts, scores, listeners, players) have their thousands
separated (``2,555``); identifiers (snapshot ids, song, player, workspace and channel ids,
input offsets) are printed as stored; times are ISO 8601 UTC to the millisecond
(``2026-01-01T00:05:00.000Z``). ``--json`` is the machine output: the HTTP API's fields, plain
integers, times in ms since the Unix epoch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, UTC
from typing import Any

from rich.console import Console
from rich.table import Table

IDENTIFIERS = frozenset({"song_id", "player_id", "workspace_id", "channel_id", "partition", "game_id", "board"})
"""Columns printed as stored and left-aligned; every other column is a quantity or an offset."""
OFFSETS = frozenset({"position", "end", "closed_by"})
"""Input offsets (``rankflow status``) and snapshot ids (``boards finals``): printed as stored, right-aligned."""
SHOWN = frozenset({"rank_change"})
"""Columns their command has already written out (``+2``, ``new``): printed as given, right-aligned."""


def utc(ms: int | None) -> str:
    """A time (ms since the epoch) for people: ISO 8601 UTC to the millisecond; ``none yet``
    for no time; the raw ms beyond year 9999 (event time is trusted, docs/semantics/windows.md 2).

    >>> utc(63_000), utc(None), utc(2**70)
    ('1970-01-01T00:01:03.000Z', 'none yet', '1180591620717411303424 ms')
    """
    if ms is None:
        return "none yet"
    try:
        return f"{datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec='milliseconds')[:-6]}Z"
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms"


def quantity(value: Any) -> str:
    """A count, score or rank, its thousands separated; bounds ``(low, high)`` as ``low..high``.

    >>> quantity(2555), quantity((1200, 1300)), quantity(-7)
    ('2,555', '1,200..1,300', '-7')
    """
    if isinstance(value, tuple):
        return "..".join(map(quantity, value))
    return f"{value:,}"


def positions(by_partition: Mapping[str, int]) -> str:
    """Input positions, partition by partition: identifiers, printed as stored.

    >>> positions({"t/1": 20000, "t/0": 7})
    't/0: 7, t/1: 20000'
    """
    return ", ".join(f"{p}: {o}" for p, o in sorted(by_partition.items()))


def print_line(text: str) -> None:
    Console().print(text, soft_wrap=True, highlight=False)


def print_rows(title: str, columns: Sequence[str], rows: Iterable[Mapping[str, Any]], footer: Sequence[str],
                warning: str | None = None) -> None:
    """``warning`` (bold red) if any, ``title`` (bold), a table of ``columns`` of each row, ``footer`` lines."""
    table = Table()
    for column in columns:
        table.add_column(column, justify="left" if column in IDENTIFIERS else "right")
    for row in rows:
        table.add_row(*(str(row[c]) if c in IDENTIFIERS or c in OFFSETS or c in SHOWN else quantity(row[c]) for c in columns))
    console = Console()
    if warning:
        console.print(warning, style="bold red")
    console.print(title, style="bold", highlight=False)
    console.print(table)
    for line in footer:
        console.print(line, soft_wrap=True, highlight=False)
