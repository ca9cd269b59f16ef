"""Seasons: boards whose scope is a span of time set by configuration (docs/semantics/boards.md 9).

A seasons file (``rankflow run --flow boards --seasons FILE``) names each season and its
start and end: ``{"winter": {"start": "2026-12-01", "end": "2027-03-01"}}`` in JSON, or the
same as TOML tables. A date is midnight UTC; an instant must carry its offset (``Z`` or
``+01:00``), so a file means the same on every machine. A season counts the results whose
``played_at`` is in ``[start, end)``. The file is read and checked before the run touches
Kafka or Redis: any mistake is one :class:`ValueError` line naming the season and the field.

Kept here, apart from the rules, so the rules take plain ``(board, start, end)`` tuples and
pay nothing when no season is configured.
"""

from __future__ import annotations

import datetime
import json
import re
import tomllib
from pathlib import Path
from typing import Any, NamedTuple

SEASON = "season:"
NAME = re.compile(r"[A-Za-z0-9_.-]{1,32}")
"""A season's name: ASCII letters, digits, ``_``, ``.``, ``-``; no ``:``, so ``season:NAME`` is one board
name whatever follows it in a key (``redis_keys.Keys.board``)."""
MAX_SEASONS = 64
"""Seasons one run may hold: each result is compared with every one of them."""
LAST_MS = 253402300799999  # docs/semantics/boards.md section 1: the last ms of 9999
DAY_MS = 86_400_000


class Season(NamedTuple):
    """One season: its board name (``season:NAME``) and ``[start, end)`` in ms since the epoch."""

    board: str
    start: int
    end: int

    @property
    def last_day(self) -> str:
        """The UTC date of the season's last ms: retention treats the season as that day's period."""
        return (datetime.date(1970, 1, 1) + datetime.timedelta(days=(self.end - 1) // DAY_MS)).isoformat()


Seasons = tuple[Season, ...]


def _instant(name: str, field: str, value: Any) -> int:
    """A start or end in ms since the epoch, from an ISO date or an instant with its offset."""
    if isinstance(value, str):
        text = value.strip()
        try:
            if len(text) == 10:
                value = datetime.date.fromisoformat(text)
            else:
                value = datetime.datetime.fromisoformat(text.replace("z", "Z"))
        except ValueError:
            raise ValueError(f"season {name!r}: {field} {value!r} is not an ISO date (2026-12-01) or instant "
                             "(2026-12-01T18:00:00Z)") from None
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            raise ValueError(f"season {name!r}: {field} {value.isoformat()!r} has no UTC offset (add Z or +HH:MM)")
        ms = (value - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)) // datetime.timedelta(milliseconds=1)
    elif isinstance(value, datetime.date):
        ms = (value - datetime.date(1970, 1, 1)).days * DAY_MS
    else:
        raise ValueError(f"season {name!r}: {field} must be an ISO date or instant, got {type(value).__name__}")
    if not 0 <= ms <= LAST_MS + 1:
        raise ValueError(f"season {name!r}: {field} is outside 1970-01-01 .. 9999-12-31")
    return int(ms)


def parse_seasons(data: Any) -> Seasons:
    """Seasons from a decoded file: ``{name: {"start": ..., "end": ...}}``, sorted by name.

    >>> parse_seasons({"w": {"start": "2026-12-01", "end": "2026-12-01T12:00:00+00:00"}})
    (Season(board='season:w', start=1796083200000, end=1796126400000),)
    >>> parse_seasons({"w": {"start": "2026-12-02", "end": "2026-12-01"}})
    Traceback (most recent call last):
    ...
    ValueError: season 'w': end must be after start
    """
    if not isinstance(data, dict):
        raise ValueError("a seasons file holds an object (a table) of seasons by name")
    if len(data) > MAX_SEASONS:
        raise ValueError(f"at most {MAX_SEASONS} seasons, got {len(data)}")
    out = []
    for name, span in data.items():
        if not NAME.fullmatch(name):
            raise ValueError(f"season name {name!r}: 1 to 32 of A-Z a-z 0-9 _ . -")
        if not isinstance(span, dict) or set(span) != {"start", "end"}:
            raise ValueError(f"season {name!r}: give exactly start and end")
        start, end = _instant(name, "start", span["start"]), _instant(name, "end", span["end"])
        if end <= start:
            raise ValueError(f"season {name!r}: end must be after start")
        out.append(Season(SEASON + name, start, end))
    return tuple(sorted(out))


def read_seasons(path: str) -> Seasons:
    """The seasons of a JSON or TOML file (by its suffix: ``.toml`` is TOML, anything else JSON)."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(raw.decode()) if path.endswith(".toml") else json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:  # tomllib.TOMLDecodeError and JSONDecodeError are ValueErrors
        raise ValueError(f"{path} is not valid {'TOML' if path.endswith('.toml') else 'JSON'}: "
                         f"{str(exc).splitlines()[0]}") from None
    try:
        return parse_seasons(data)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def fingerprint(seasons: Seasons) -> str | None:
    """What a recovery directory records of the seasons (a resume must keep them): None without any."""
    return json.dumps([list(s) for s in seasons], separators=(",", ":")) if seasons else None
