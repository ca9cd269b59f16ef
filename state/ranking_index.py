"""A song partition's counts and their ranking order.

The counter stage needs what a Redis sorted set gave the first design: change a
song's count in O(log D) and read the top K in O(log D + K). ``SongIndex`` keeps a
count map beside a balanced-tree index (``sortedcontainers.SortedList``) of
``(count, song_id)`` pairs. Ascending tuple order read backwards is exactly the
ranking order of docs/semantics/listeners.md section 4: count descending, then song_id descending.
Python compares ``str`` by code point, which for valid UTF-8 is byte order.

Only songs with a positive count are in the index. A negative count is a bug
upstream: it is kept as it is (never clamped, so later changes still add up) and
reported by :meth:`SongIndex.apply` to the caller.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping

from sortedcontainers import SortedList


class SongIndex:
    """Count map plus ranking index for the songs of one partition."""

    __slots__ = ("_counts", "_index", "_total")

    def __init__(self, counts: Mapping[str, int] | None = None) -> None:
        self._counts: dict[str, int] = dict(counts or {})
        self._index = SortedList((c, s) for s, c in self._counts.items() if c > 0)
        self._total = sum(self._counts.values())

    def apply(self, changes: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
        """Add net changes ``(song_id, delta)``; return the songs left negative."""
        counts, index = self._counts, self._index
        negative = []
        for song, delta in changes:
            if not delta:
                continue
            old = counts.get(song, 0)
            new = old + delta
            self._total += delta
            if old > 0:
                index.remove((old, song))
            if new > 0:
                index.add((new, song))
            if new:
                counts[song] = new
            else:
                del counts[song]
            if new < 0:
                negative.append((song, new))
        return negative

    def top(self, k: int) -> list[tuple[str, int]]:
        """The first ``k`` songs in ranking order, as ``(song_id, count)``."""
        n = len(self._index)
        return [(s, c) for c, s in self._index.islice(max(0, n - k), n, reverse=True)]

    def count(self, song: str) -> int:
        return self._counts.get(song, 0)

    def rank(self, song: str) -> int | None:
        """The song's 1-based place in ranking order; None unless its count is positive."""
        count = self._counts.get(song, 0)
        if count <= 0:
            return None
        return len(self._index) - self._index.bisect_right((count, song)) + 1

    def set_counts(self, counts: Mapping[str, int]) -> None:
        """Make these songs' counts the given ones (0 removes a song)."""
        get = self._counts.get
        self.apply((song, n - get(song, 0)) for song, n in counts.items())

    @property
    def total(self) -> int:
        """Sum of all counts (negative ones included, so errors stay visible)."""
        return self._total

    @property
    def active_songs(self) -> int:
        """Songs with a positive count: the ones that rank."""
        return len(self._index)

    def counts(self) -> dict[str, int]:
        """A copy of the non-zero counts, for snapshots and checks."""
        return dict(self._counts)


BoardKey = tuple[int, int, str]
"""``(-score, reached_at, player_id)``: ascending order is a score board's ranking
order (docs/semantics/boards.md section 4: score descending, then ``reached_at`` ascending, then
``player_id`` ascending by code point, which is UTF-8 byte order)."""


class BoardTop:
    """The best ``capacity`` entries of one score board in one partition.

    A score board's entries only ever move up: totals only grow, a best only rises,
    and ``reached_at`` changes only with a rise or, at an equal score, to an earlier
    time (docs/semantics/boards.md sections 3 and 4). So an entry pushed out of the top never has to
    come back by itself: it returns with the change that raises it. That is why this
    index keeps only ``capacity`` entries, not the whole board (10M players stay in
    Redis and in the per-player stage, not here a third time). An entry that gets
    worse breaks that argument: :meth:`offer` refuses it and says so.

    >>> top = BoardTop(2)
    >>> for player, score, at in [("ana", 50, 10), ("bo", 50, 5), ("cy", 70, 9)]:
    ...     top.offer(player, score, at)
    True
    True
    True
    >>> top.top(5)
    [('cy', 70, 9), ('bo', 50, 5)]
    >>> top.offer("ana", 80, 11), top.top(5)
    (True, [('ana', 80, 11), ('cy', 70, 9)])
    """

    __slots__ = ("capacity", "changed", "_keys", "_index", "_floor")

    def __init__(self, capacity: int, entries: Iterable[tuple[str, int, int]] = ()) -> None:
        self.capacity = capacity
        self.changed = False  # whether the top changed since the owner last cleared this
        self._keys: dict[str, BoardKey] = {}
        # a plain sorted list, not a SortedList: it holds at most K_max (1000) keys, so the C
        # ``bisect`` module and one memmove per change beat SortedList's Python layers (3x here)
        self._index: list[BoardKey] = []
        self._floor: BoardKey | None = None  # the last key held once the index is full
        for player, score, reached_at in entries:
            self.offer(player, score, reached_at)

    def offer(self, player: str, score: int, reached_at: int) -> bool:
        """Take the player's new entry; False (and nothing changes) if it is worse than
        the one held. O(log K) comparisons and an O(K) memmove.

        >>> top = BoardTop(1)
        >>> top.offer("a", 5, 1), top.offer("a", 4, 1), top.top(1)
        (True, False, [('a', 5, 1)])
        """
        keys, floor = self._keys, self._floor
        if floor is not None and -score > floor[0] and player not in keys:
            return True  # below the top: nothing to hold (the common case on a big board; no tuple built)
        key = (-score, reached_at, player)
        index = self._index
        old = keys.get(player)
        if old is not None:
            if key >= old:
                return key == old
            del index[bisect_left(index, old)]
        elif floor is not None:
            if key > floor:
                return True  # below the top
            del keys[index.pop()[2]]
        insort(index, key)
        keys[player] = key
        if len(index) >= self.capacity:
            self._floor = index[-1]
        self.changed = True
        return True

    def top(self, n: int) -> list[tuple[str, int, int]]:
        """The first ``n`` entries in ranking order, as ``(player_id, score, reached_at)``. O(n).

        >>> BoardTop(3, [("b", 1, 0), ("a", 1, 0)]).top(1)
        [('a', 1, 0)]
        """
        return [(p, -s, at) for s, at, p in self._index[:n]]

    def __len__(self) -> int:
        return len(self._index)


class CountTop:
    """The best ``capacity`` of a table of counts that mostly grow, in ranking order.

    The order is :class:`SongIndex`'s (count descending, then key descending). The table
    itself lives elsewhere (recent plays: ``state.window_rules.WindowCounts.counts``);
    this holds only its top, as ascending ``(count, key)`` pairs, so a change below the
    top costs a comparison, not an update of an index of every key. That is exact as
    long as counts only grow: a key pushed out of the top comes back with the change that
    raises it. A count that falls inside the top breaks that argument, so then the top is
    taken again from the whole table, in O(table). Recent plays' counts fall only when a
    bucket leaves the window (once a minute of event time).

    >>> counts = {"a": 3, "b": 1, "c": 2}
    >>> top = CountTop(2, counts)
    >>> top.top(5)
    [('a', 3), ('c', 2)]
    >>> counts.update(b=4); top.update({"b": 4}, counts); top.top(5)
    [('b', 4), ('a', 3)]
    >>> counts.update(b=0, a=1); del counts["b"]; top.update({"b": 0, "a": 1}, counts); top.top(5)
    [('c', 2), ('a', 1)]
    """

    __slots__ = ("capacity", "_held", "_index")

    def __init__(self, capacity: int, counts: Mapping[str, int] | None = None) -> None:
        self.capacity = capacity
        self._held: dict[str, int] = {}  # key -> its count, for the keys in the top
        self._index: list[tuple[int, str]] = []  # ascending: the first is the floor
        if counts:
            self._take_all(counts)

    def update(self, changed: Mapping[str, int], counts: Mapping[str, int]) -> None:
        """``changed``: keys whose count changed, with their counts now (0: gone); ``counts``:
        the whole table after those changes."""
        held, index, capacity = self._held, self._index, self.capacity
        for key, n in changed.items():
            old = held.get(key)
            if old is not None:
                if n < old:  # a count fell inside the top: a key below may now belong in it
                    self._take_all(counts)
                    return
                del index[bisect_left(index, (old, key))]
                insort(index, (n, key))
                held[key] = n
            elif n > 0 and (len(index) < capacity or (n, key) > index[0]):
                insort(index, (n, key))
                held[key] = n
                if len(index) > capacity:
                    del held[index.pop(0)[1]]

    def _take_all(self, counts: Mapping[str, int]) -> None:
        best = heapq.nlargest(self.capacity, ((n, key) for key, n in counts.items() if n > 0))
        best.reverse()
        self._index = best
        self._held = {key: n for n, key in best}

    def top(self, k: int) -> list[tuple[str, int]]:
        """The first ``k`` keys in ranking order, as ``(key, count)``."""
        index = self._index
        return [(key, n) for n, key in reversed(index[max(0, len(index) - k):])]
