"""A board's earlier ranks from its ranks now and the entries that moved since: rank change's arithmetic.

Issue 42 item 3 asks every entry of a top and a player's answer for its ``rank_change``: the
positions gained since the previous snapshot that changed the board (or since a snapshot asked
for). Keeping every board as it was at each retained snapshot would cost a copy per snapshot;
this needs only what moved. With :class:`Moves` the entries whose key changed between an
earlier state ``S`` and now (each one's key at ``S``, None if it was not on the board, and its
key now), an entry's rank at ``S`` is

    rank0_S(k_S) = below_now(k_S) - #{moved: key now < k_S} + #{moved, on the board at S: key at S < k_S}

where ``k_S`` is the entry's key at ``S`` (its key now if it did not move) and ``below_now``
counts the entries before a key on the board now (``state.board_index.BoardIndex.below``, or a
sorted set's count): the entries that did not move are where they were, so counting them
now counts them at ``S``. Each answer costs two bisections of the moved keys beside the
board's own count, whatever the board's size. A board loses no entry but by being dropped
whole (docs/semantics/boards.md 7), so every entry at ``S`` is on the board now.

:meth:`Moves.then` chains the moves of consecutive change sets (the first key at ``S``, the
last key now), so the moves since any snapshot still retained are the change sets since it.
Where the moves are kept (the publisher beside the snapshot, or the readers' copies) is
docs/design.md's "Rank change: where the previous ranks come from".
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable


class Moves:
    """The entries of one board whose key changed between a state ``S`` and now: per player its key
    at ``S`` (None: not on the board then) and now, both :func:`state.board_index.entry_key`\\ s."""

    __slots__ = ("moved", "_before", "_now")

    def __init__(self, moved: dict[str, tuple[bytes | None, bytes]] | None = None) -> None:
        self.moved: dict[str, tuple[bytes | None, bytes]] = {} if moved is None else moved
        self._before: list[bytes] | None = None  # sorted keys at S of the moved entries on the board then
        self._now: list[bytes] | None = None  # sorted keys now of the moved entries

    def record(self, player: str, before: bytes | None, now: bytes) -> None:
        """One change, after those recorded already: the entry keeps its key at ``S``."""
        first = self.moved.get(player)
        self.moved[player] = (before if first is None else first[0], now)
        self._before = self._now = None

    def then(self, later: Moves) -> Moves:
        """These moves followed by ``later``'s (the change sets after them): the moves from this
        one's ``S`` to ``later``'s now."""
        chained = Moves(dict(self.moved))
        for player, (before, now) in later.moved.items():
            chained.record(player, before, now)
        return chained

    def rank0_then(self, player: str, key_now: bytes, below_now: Callable[[bytes], int]) -> int | None:
        """The 0-based rank at ``S`` of ``player``, whose key is ``key_now`` on the board now; None if
        it was not on the board at ``S``."""
        moved = self.moved.get(player)
        key_then = key_now if moved is None else moved[0]
        if key_then is None:
            return None
        if self._before is None or self._now is None:
            self._before = sorted(before for before, _ in self.moved.values() if before is not None)
            self._now = sorted(now for _, now in self.moved.values())
        return below_now(key_then) - bisect_left(self._now, key_then) + bisect_left(self._before, key_then)

    def gained(self, player: str, key_now: bytes, rank0_now: int, below_now: Callable[[bytes], int]) -> int | None:
        """``rank_change``: the positions ``player`` gained since ``S`` (negative: lost), None for an
        entry new since then."""
        then = self.rank0_then(player, key_now, below_now)
        return None if then is None else then - rank0_now
