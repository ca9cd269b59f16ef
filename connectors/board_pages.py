"""Pages with cursors, tie styles and percentiles of a board (docs/semantics/boards.md 5.1 to 5.3).

What the Redis reader (``connectors.board_read``) and the in-process mirror
(``api.board_mirror``) share, so both answer the same bytes: the cursor's text, the
checks of the new parameters (a usage error is a ``ValueError``, as ``check_n``'s), a
tie style's ranks from the items both already make, and a percentile from a rank.

A cursor names the last entry a page showed, ``(score, reached_at, player_id)``, the
three fields that place an entry in section 4's order, never an offset: the next page
starts after that place in the snapshot it is read from, wherever the entries around
it moved. Its text is base64url (no padding) of the JSON array ``[score, reached_at,
player_id]``: opaque to a client, which sends back what it got, and documented so that
a client may build one (docs/semantics/boards.md 5.1).

Percentiles are exact: a rank's percentile is the fraction ``100 * (entries - rank) /
entries`` rounded half-even to two decimals only when shown; "the top P percent" and
"the score at percentile P" compare the exact fraction, with P given to two decimals
(its hundredths travel as an integer, also to the Lua script).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from typing import Any, NamedTuple

import orjson

TIES = ("ordinal", "competition", "dense")
"""The tie styles: ``ordinal`` every rank distinct (the answers' ``rank`` without ``ties``),
``competition`` "1224", ``dense`` "1223"."""

MAX_TIME = 253402300799999
"""The greatest ``reached_at`` (docs/semantics/boards.md 1): a cursor's beyond it is no entry's."""

PERCENT = re.compile(r"(100(\.0{1,2})?|[0-9]{1,2}(\.[0-9]{1,2})?)")
"""A percentile as the routes take it: 0 to 100, at most two decimals (ASCII digits)."""


class Cursor(NamedTuple):
    """The last entry a page showed: where the next page starts after."""

    score: int
    reached_at: int
    player_id: str


def encode_cursor(cursor: Cursor) -> str:
    """A page's ``next``.

    >>> encode_cursor(Cursor(50, 1798884000000, "ana"))
    'WzUwLDE3OTg4ODQwMDAwMDAsImFuYSJd'
    >>> decode_cursor(encode_cursor(Cursor(0, 5, "é/🎮")))
    Cursor(score=0, reached_at=5, player_id='é/🎮')
    """
    return base64.urlsafe_b64encode(orjson.dumps(list(cursor))).rstrip(b"=").decode()


def decode_cursor(text: str) -> Cursor:
    """The cursor ``text`` names; a ``ValueError`` (a usage error) for anything no page gave."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        score, reached_at, player = orjson.loads(raw)
    except (binascii.Error, ValueError, TypeError, orjson.JSONDecodeError):
        raise ValueError(f"after is not a cursor a page gave: {text[:80]!r}") from None
    if not (type(score) is int and type(reached_at) is int and isinstance(player, str) and player
            and 0 <= score < 2**53 and 0 <= reached_at <= MAX_TIME and encode_cursor(Cursor(score, reached_at, player)) == text):
        raise ValueError(f"after is not a cursor a page gave: {text[:80]!r}")
    return Cursor(score, reached_at, player)


def check_ties(ties: str | None) -> None:
    """A usage error unless ``ties`` is a tie style (or None: the answers as without it)."""
    if ties is not None and ties not in TIES:
        raise ValueError(f"ties must be one of {', '.join(TIES)}, got {ties!r}")


def hundredths(percent: str) -> int:
    """A percentile's text (0 to 100, at most two decimals) in hundredths of a percent.

    >>> hundredths("99.9"), hundredths("0"), hundredths("100.00")
    (9990, 0, 10000)
    """
    if not PERCENT.fullmatch(percent):
        raise ValueError(f"a percentile is a number from 0 to 100 with at most two decimals, got {percent[:40]!r}")
    whole, _, part = percent.partition(".")
    return int(whole) * 100 + int((part + "00")[:2])


def percentile(rank: int, entries: int) -> float:
    """``100 * (entries - rank) / entries`` rounded half-even to two decimals.

    >>> percentile(1, 1000), percentile(1, 1), percentile(2, 8), percentile(1, 3)
    (99.9, 0.0, 75.0, 66.67)
    """
    q, rest = divmod(10000 * (entries - rank), entries)  # integers: exact, and cheaper than a Fraction
    if 2 * rest > entries or (2 * rest == entries and q % 2):
        q += 1
    return q / 100


def restyle(items: list[dict[str, Any]], ties: str | None, dense_above: int = 0) -> list[dict[str, Any]]:
    """``items`` (each with ``rank``, ``competition_rank`` and ``score``, in board order) with
    ``rank`` the ``ties`` style's: the competition rank, or the dense one (``dense_above``: the
    distinct scores better than the first item's); as they are without a style or ``ordinal``."""
    if ties == "competition":
        for item in items:
            item["rank"] = item["competition_rank"]
    elif ties == "dense":
        dense, previous = dense_above, None
        for item in items:
            if item["score"] != previous:
                dense, previous = dense + 1, item["score"]
            item["rank"] = dense
    return items


def styled_rank(ties: str | None, rank: int, competition: int, dense_above: int) -> int:
    """One player's ``rank`` in the ``ties`` style."""
    if ties == "competition":
        return competition
    return dense_above + 1 if ties == "dense" else rank


def within_percent(items: list[dict[str, Any]], entries: int, percent: int) -> list[dict[str, Any]]:
    """The first items whose (styled) rank is at most ``entries * percent / 10000`` (``percent``
    in hundredths): the top P percent of a board's first items."""
    return [item for item in items if 10000 * item["rank"] <= entries * percent]


class TopAsk(NamedTuple):
    """What a top asks for: ``kind`` ``top`` (the first n entries, as without the new
    parameters), ``first`` (the first page: an empty ``after``) or ``after`` (the page after
    ``cursor``); ``share``: only the top ``share`` hundredths of a percent (None: the whole board)."""

    kind: str
    cursor: Cursor | None = None
    share: int | None = None

    def reads(self, n: int) -> int:
        """The entries to read for a page of ``n``: one more when paging through a share, to know
        whether the next one is still in it (``next``)."""
        return n + (self.kind != "top" and self.share is not None)


def top_ask(after: str | None, percent: str | None) -> TopAsk:
    """A top's ``after`` and ``percentile`` parameters, checked (a ``ValueError`` is a usage error):
    both together page through the top P percent."""
    share = None if percent is None else hundredths(percent)
    if after:
        return TopAsk("after", decode_cursor(after), share)
    return TopAsk("top" if after is None else "first", None, share)


def page_answer(answer: dict[str, Any], total: int, start: int, items: list[dict[str, Any]], n: int,
                share: int | None, cursor_of: Callable[[int], Cursor]) -> dict[str, Any]:
    """A page's answer: ``answer``'s fields, at most ``n`` of ``items`` (the entries from rank
    ``start + 1`` on, :meth:`TopAsk.reads` of them) and, when entries follow them (in the
    ``share`` if one is asked), ``next``: the cursor of the last shown (``cursor_of(i)``: the
    cursor of ``items[i]``)."""
    if share is not None:
        items = within_percent(items, total, share)
        more = len(items) > n
    else:
        more = start + min(len(items), n) < total
    items = items[:n]
    out = {**answer, "total_players": total, "items": items}
    if more and items:
        out["next"] = encode_cursor(cursor_of(len(items) - 1))
    return out
