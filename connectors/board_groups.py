"""Group boards as readers name them, and as Redis holds them (docs/semantics/boards.md 10).

A run with ``--group-by FIELD`` keeps, per value of that result field, every board a game has:
readers name them ``BOARD@FIELD=VALUE`` (``all@region=eu``, ``weekly@region=eu``,
``final:daily:2027-01-04@region=eu``). The flow holds a group as a game of its own, the game
key ``GAME@FIELD=VALUE``, so its keys, aliases, retention, finals and rank change are a game's
without a line of their own; this module turns a reader's ``(game, BOARD@FIELD=VALUE)`` into
that key's ``(GAME@FIELD=VALUE, BOARD)`` and back, for the queries and for the listing.

Nothing here is paid by a board without ``@``: a name is split only when it holds one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

SUFFIX = r"@[A-Za-z_][A-Za-z0-9_]{0,31}=[A-Za-z0-9_.-]{1,32}"
"""What follows a board name to name its group's board: ``@FIELD=VALUE`` (``--group-by``'s field
and the kernel's check of a value, ``native/src/score.rs``)."""

_GROUP_GAME = re.compile(rf"(.+?)({SUFFIX})")


def split(game: str, board: str) -> tuple[str, str, str]:
    """``(game key, board, suffix)`` of a board as a reader names it: a group board is its
    group's game key's board; any other is itself, with an empty suffix.

    >>> split("arena", "weekly@region=eu"), split("arena", "all")
    (('arena@region=eu', 'weekly', '@region=eu'), ('arena', 'all', ''))
    """
    at = board.find("@")
    if at < 0:
        return game, board, ""
    suffix = board[at:]
    return game + suffix, board[:at], suffix


def game_of(key: str) -> tuple[str, str]:
    """``(game, suffix)`` of a game key: a group's (``GAME@FIELD=VALUE``), or a game's with no suffix.

    >>> game_of("arena@region=eu"), game_of("arena")
    (('arena', '@region=eu'), ('arena', ''))
    """
    if "@" not in key:
        return key, ""
    found = _GROUP_GAME.fullmatch(key)
    return (key, "") if found is None else (found[1], found[2])


def folded(boards: Iterable[tuple[str, str] | list[str]]) -> list[tuple[str, str]]:
    """The ``(game, board)`` pairs a listing shows: a group's boards under their game, named
    ``BOARD@FIELD=VALUE``.

    >>> folded([("arena", "all"), ("arena@region=eu", "daily:2027-01-04")])
    [('arena', 'all'), ('arena', 'daily:2027-01-04@region=eu')]
    """
    out = []
    for key, board in boards:
        game, suffix = game_of(key)
        out.append((game, board + suffix))
    return out
